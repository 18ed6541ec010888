"""The prebuilt loops (msopt/_loops, built by msopt.prebuild): used when fresh, the same figures and bytes as numba's
just-in-time form, rebuilt into a clean directory, refused when the sources changed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.compiled import jit

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"
PACKAGE = Path(jit.__file__).parent.parent  # msopt/


def _timeless(document):
    """``document`` without its wall-clock figures (keys ending in elapsed_s)."""
    if isinstance(document, dict):
        return {k: _timeless(v) for k, v in document.items() if not k.endswith("elapsed_s")}
    if isinstance(document, list):
        return [_timeless(v) for v in document]
    return document


def _msopt(args, prebuilt, cwd):
    env = dict(os.environ, MSOPT_PREBUILT="1" if prebuilt else "0")
    code = (
        "import sys\nfrom msopt.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "from msopt.compiled import jit\n"
        "print('PREBUILT', jit.prebuilt() is not None, 'numba' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )
    assert out.returncode == 0, out.stderr
    return out.stdout, out.stderr.rsplit("PREBUILT ", 1)[1].split()


def test_the_installed_extension_is_fresh_and_planning_loads_no_numba(tmp_path):
    """Setup builds the extension: every policy's plan, its simulations and its report then run on the
    extension's exports alone (a compiled function missing from SIGNATURES would raise), without numba."""
    assert jit.prebuilt() is not None, "msopt/_loops is missing or stale: run python -m msopt.prebuild"
    code = (
        "import sys\nfrom msopt import api\nfrom msopt.compiled import jit\n"
        "for policy in ('auto', 'chains', 'towers', 'stage', 'embedding', 'collective'):\n"
        "    for model in ('towers_tf2', 'deepfm_tf1', 'stage_tf1'):\n"
        "        api.partition(f'{sys.argv[1]}/{model}', 4, policy, f'{sys.argv[2]}/{model}-{policy}',"
        " report=f'{sys.argv[2]}/{model}-{policy}.json')\n"
        "api.simulate(f'{sys.argv[1]}/deepfm_tf1', 4)\n"
        "assert jit.prebuilt() is not None\n"
        "assert 'numba' not in sys.modules, 'numba imported'\n"
    )
    env = dict(os.environ, MSOPT_PREBUILT="1")
    out = subprocess.run(
        [sys.executable, "-c", code, str(SAMPLES), str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("model", ["deepfm_tf1", "towers_tf2", "stage_tf1"])
def test_prebuilt_and_just_in_time_forms_give_the_same_plans_and_figures(tmp_path, model):
    outputs = {}
    for prebuilt in (True, False):
        out = tmp_path / f"out{int(prebuilt)}"
        report = tmp_path / f"report{int(prebuilt)}.json"
        args = ["partition", str(SAMPLES / model), "--streams", "4", "-o", str(out), "--report", str(report), "--json"]
        stdout, (used, numba) = _msopt(args, prebuilt, tmp_path)
        assert used == str(prebuilt) and numba == str(not prebuilt)
        document = _timeless(json.loads(stdout))
        document.pop("output", None)
        simulated, _ = _msopt(["simulate", str(SAMPLES / model), "--streams", "4", "--json"], prebuilt, tmp_path)
        outputs[prebuilt] = (
            json.dumps(document, sort_keys=True).replace(str(out), "OUT"),
            _timeless(json.loads(report.read_text().replace(str(out), "OUT"))),
            (out / "saved_model.pb").read_bytes(),
            _timeless(json.loads(simulated)),
        )
    assert outputs[True][0] == outputs[False][0]
    assert outputs[True][1:] == outputs[False][1:]


def test_the_digest_follows_every_compiled_source(tmp_path):
    modules = set(jit.digested_modules())
    assert {"compiled.jit", "compiled.prebuild", "simulator.event_loop", "rules.chains"} <= modules
    files = [Path(*module.split(".")).with_suffix(".py") for module in modules]
    for file in files:
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PACKAGE / file, tmp_path / file)
    assert jit.sources_digest(tmp_path) == jit.sources_digest()
    for file in files:
        (tmp_path / file).write_text((PACKAGE / file).read_text() + "\n# edited\n")
        assert jit.sources_digest(tmp_path) != jit.sources_digest(), file
        shutil.copy(PACKAGE / file, tmp_path / file)


def test_prebuild_writes_a_working_extension_and_leaves_nothing_behind(tmp_path):
    """The build in a watched temporary directory: the extension it writes exports every signature and the
    digest of the current sources; no build directory is left (pycc leaves its own when it fails)."""
    scratch, target = tmp_path / "tmp", tmp_path / "out"
    scratch.mkdir()
    target.mkdir()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom msopt.compiled import prebuild\nprint(prebuild.build(sys.argv[1]))",
            str(target),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TMPDIR=str(scratch)),
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    built = Path(out.stdout.strip())
    assert built.parent == target and [p.name for p in target.iterdir()] == [built.name]
    assert list(scratch.iterdir()) == []
    check = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('_loops', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\n"
        "from msopt.compiled import jit\n"
        "assert module.sources() == jit.sources_digest()\n"
        "assert all(callable(getattr(module, jit.export_name(n))) for n in jit.SIGNATURES)\n"
        "assert 'numba' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", check, str(built)], check=True, timeout=120)


@pytest.mark.parametrize("edited", [False, True])
def test_a_stale_extension_is_not_used(tmp_path, edited):
    """A copy of the package uses its extension, unless its event loop was edited after the build."""
    copy = tmp_path / "msopt"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if edited:
        (copy / "simulator" / "event_loop.py").write_text(
            (copy / "simulator" / "event_loop.py").read_text() + "\n# edited after the build\n"
        )
    code = (
        "from msopt.compiled import jit\nimport msopt\nassert msopt.__file__.startswith(%r)\nprint(jit.prebuilt())"
        % str(copy)
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
    )
    assert out.returncode == 0, out.stderr
    assert (out.stdout.strip() == "None") == edited, out.stdout
    check = subprocess.run(
        [sys.executable, "-m", "msopt.prebuild", "--check"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
    )
    assert check.returncode == int(edited), check.stderr
    assert ("built from other sources" in check.stderr) == edited, check.stderr


def test_a_compiled_function_the_extension_does_not_export_refuses_python_callers():
    """With the extension in use, a compiled function missing from SIGNATURES would otherwise run interpreted
    (slowly, silently): it becomes a stub that names the missing entry."""
    assert jit.prebuilt() is not None

    def helper(values):
        return values[0]

    stub = jit.compiled(helper)
    with pytest.raises(RuntimeError, match=r"test_prebuilt\.helper is compiled but not in SIGNATURES"):
        stub([1])
