"""Every bad input ends with one line on stderr, exit code 2, no traceback, no output, input untouched."""

import pytest
from conftest import SAMPLES
from test_emit import tree_digest

from msopt.graph import protos


def assert_clean_failure(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("msopt: error:"), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for word in words:
        assert word in lines[0]


def test_missing_path(msopt, tmp_path):
    assert_clean_failure(msopt("inspect", tmp_path / "nope"), "no such file")


def test_directory_that_is_not_a_model(msopt, tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    assert_clean_failure(msopt("partition", tmp_path, "--streams", 2), "not a TensorFlow model")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_or_truncated_protobuf(msopt, sample, damage):
    src = sample("deepfm_tf1")
    pb = src / "saved_model.pb"
    data = pb.read_bytes()
    pb.write_bytes(b"\x0a\xff\xff\xff\x0fnot a proto at all" if damage == "garbage" else data[: len(data) // 2])
    before = tree_digest(src)
    assert_clean_failure(msopt("partition", src, "--streams", 2), "saved_model.pb")
    assert tree_digest(src) == before
    assert not (src.parent / "deepfm_tf1_ms2").exists()


def test_truncated_graph_def(msopt, tmp_path):
    data = (SAMPLES / "linreg_frozen.pb").read_bytes()
    bad = tmp_path / "g.pb"
    bad.write_bytes(data[:101])
    assert_clean_failure(msopt("inspect", bad), "g.pb")


def test_unknown_tag_set(msopt):
    assert_clean_failure(msopt("inspect", SAMPLES / "linreg_tf1", "--tags", "train,gpu"), "train,gpu", "serve")


def test_signature_without_dtype(msopt, sample):
    """TensorFlow would abort the whole process on this (F tensor.cc Type not set): refuse it up front."""
    src = sample("linreg_tf1")
    pb = src / "saved_model.pb"
    saved = protos.SavedModel.FromString(pb.read_bytes())
    saved.meta_graphs[0].signature_def["serving_default"].inputs["X"].dtype = 0
    pb.write_bytes(saved.SerializeToString())
    assert_clean_failure(msopt("partition", src, "--streams", 2, "--verify"), "'X'", "no dtype")


def test_signature_naming_a_missing_tensor(msopt, sample):
    src = sample("linreg_tf1")
    pb = src / "saved_model.pb"
    saved = protos.SavedModel.FromString(pb.read_bytes())
    saved.meta_graphs[0].signature_def["serving_default"].outputs["z"].name = "ghost:0"
    pb.write_bytes(saved.SerializeToString())
    assert_clean_failure(msopt("inspect", src), "ghost:0")


def test_output_exists(msopt, sample, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep").write_text("x")
    assert_clean_failure(msopt("partition", sample("linreg_tf1"), "--streams", 2, "-o", out), "already exists")
    assert (out / "keep").read_text() == "x"


def test_stream_id_out_of_range(msopt, sample):
    """linreg_tf1 carries stream ids 0 and 1: one stream cannot hold them."""
    assert_clean_failure(
        msopt("partition", sample("linreg_tf1"), "--streams", 1, "--policy", "none"), "stream 1", "--streams 1"
    )


def test_bad_stream_count_is_a_usage_error(msopt):
    result = msopt("partition", SAMPLES / "linreg_tf1", "--streams", 0)
    assert result.returncode == 2 and "Traceback" not in result.stderr
