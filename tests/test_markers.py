"""The `tf` marker: with -m "not tf", a test that imports TensorFlow without the marker fails, naming itself."""

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

FORGOT_IN_PROCESS = """
def test_imports_tensorflow():
    import tensorflow  # noqa: F401
"""
FORGOT_IN_A_SUBPROCESS = """
import subprocess, sys

def test_starts_tensorflow():
    done = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
"""
FORGOT_AT_IMPORT = """
import pytest

tf = pytest.importorskip("tensorflow")

def test_uses_tensorflow():
    pass
"""
MARKED = """
import pytest

pytestmark = pytest.mark.tf

import tensorflow  # noqa: E402,F401

def test_marked():
    pass
"""
UNMARKED_PROTO_ONLY = """
def test_proto_only():
    import google.protobuf  # noqa: F401
"""


def quick_suite(folder, *args):
    """pytest -m "not tf" over ``folder`` with this suite's conftest and markers, in a fresh process."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "-rfE"]
    command += ["-c", str(ROOT / "pyproject.toml"), "-m", "not tf", *args, str(folder)]
    env = {k: v for k, v in os.environ.items() if k != "MSOPT_TEST_FORBID_TF"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    return subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env, timeout=300).stdout


def test_an_unmarked_tensorflow_test_fails_the_quick_suite_naming_itself(tmp_path):
    modules = {
        "test_forgot_in_process": FORGOT_IN_PROCESS,
        "test_forgot_in_a_subprocess": FORGOT_IN_A_SUBPROCESS,
        "test_forgot_at_import": FORGOT_AT_IMPORT,
        "test_marked": MARKED,
        "test_proto_only": UNMARKED_PROTO_ONLY,
    }
    for name, code in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    out = quick_suite(tmp_path, "--continue-on-collection-errors")
    assert "test_forgot_at_import.py imports tensorflow in a run without the 'tf' marker" in out, out
    assert "test_forgot_in_process.py::test_imports_tensorflow imports tensorflow" in out, out
    assert "test_forgot_in_a_subprocess.py::test_starts_tensorflow imports tensorflow" in out, out
    assert "test_marked.py" not in out, out  # a module marked tf is not even imported
    assert "2 failed, 1 passed, 1 error" in out, out
