"""--inputs files are data, never code: no pickle, only the arrays the signature needs, corrupt files are bad input."""

import pickle

import numpy as np
import pytest
from conftest import SAMPLES, run_msopt

from msopt.errors import InputError
from msopt.files.inputs import read_npz

pytestmark = pytest.mark.tf

LINREG = SAMPLES / "linreg_tf1"
SPEC = {"X": {"dtype": "float", "shape": [None, 1]}, "Y": {"dtype": "float", "shape": [None, 1]}}


class Payload:
    """Unpickling this creates the marker file: proof that loading ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def good_arrays():
    return {"X": np.ones((2, 1), np.float32), "Y": np.ones((2, 1), np.float32)}


def make_bad(kind, directory):
    """The reproducers: a pickle named .npz, an object array under an unused or a used key, corrupt files."""
    marker = directory / "PWNED"
    path = directory / f"{kind}.npz"
    if kind == "evil":
        path.write_bytes(pickle.dumps({"X": Payload(marker)}))
    elif kind == "evil_extra_key":
        np.savez(path, **good_arrays(), extra=np.array([Payload(marker)], dtype=object))
    elif kind == "evil_used_key":
        np.savez(path, X=np.array([[Payload(marker)]], dtype=object), Y=good_arrays()["Y"])
    elif kind == "not_zip":
        path.write_bytes(b"this is not a zip file at all\n" * 4)
    elif kind == "truncated":
        np.savez(path, **good_arrays())
        path.write_bytes(path.read_bytes()[:150])
    elif kind == "npy":
        path = directory / "one.npy"
        np.save(path, good_arrays()["X"])
    elif kind == "empty":
        path.write_bytes(b"")
    return path, marker


BAD = ["evil", "evil_used_key", "not_zip", "truncated", "npy", "empty"]


@pytest.mark.parametrize("kind", BAD)
def test_bad_inputs_file_is_input_error_and_runs_no_code(kind, tmp_path):
    path, marker = make_bad(kind, tmp_path)
    with pytest.raises(InputError, match=str(path.name)):
        read_npz(path, SPEC)
    assert not marker.exists()


def test_an_object_array_under_an_unused_key_is_never_read(tmp_path):
    path, marker = make_bad("evil_extra_key", tmp_path)
    batch = read_npz(path, SPEC)
    assert sorted(batch) == ["X", "Y"] and not marker.exists()


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("command", ["run", "partition"])
def test_bad_inputs_file_exits_2_with_one_line_naming_it(kind, command, tmp_path):
    path, marker = make_bad(kind, tmp_path)
    if command == "run":
        done = run_msopt("run", LINREG, "--device", "cpu", "--inputs", path)
    else:
        done = run_msopt("partition", LINREG, "-n", "2", "--verify", "--inputs", path, "-o", tmp_path / "out")
        assert not (tmp_path / "out").exists()
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("msopt: error: ") and done.stderr.count("\n") == 1 and str(path) in done.stderr
    assert not marker.exists()


def test_run_with_an_object_array_under_an_unused_key_runs_and_runs_no_code(tmp_path):
    path, marker = make_bad("evil_extra_key", tmp_path)
    done = run_msopt("run", LINREG, "--device", "cpu", "--inputs", path, "-k", 2, "-w", 0)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
