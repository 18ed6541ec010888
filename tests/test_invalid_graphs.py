"""Malformed graphs end with one `msopt: error:` line naming the node, exit 2, and nothing written."""

import bad_inputs
import pytest
from bad_inputs import cli
from conftest import SAMPLES

from msopt.graph.validate import MAX_CALL_DEPTH

COMMANDS = (["inspect"], ["partition", "--streams", "2"], ["simulate", "--streams", "2"])


def refused(tmp_path, path, *words, commands=COMMANDS):
    """Every proto-only command refuses ``path`` in one line holding ``words``, writing nothing."""
    before = path.read_bytes()
    out = tmp_path / "out"
    for command in commands:
        extra = ["-o", out] if command[0] == "partition" else []
        code, stdout, stderr = cli(*command, path, *extra)
        assert code == 2, (command, code, stderr)
        assert len(stderr) == 1 and stderr[0].startswith("msopt: error: "), stderr
        assert "internal error" not in stderr[0] and stdout == ""
        for word in words:
            assert word in stderr[0], (word, stderr[0])
    assert path.read_bytes() == before and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_non_numeric_output_port(tmp_path):
    refused(tmp_path, bad_inputs.bad_port(tmp_path), "badport.pbtxt", "weight_x/read", "weight_x:abc")


def test_shape_of_more_elements_than_int64(tmp_path):
    refused(tmp_path, bad_inputs.huge_shape(tmp_path), "huge.pbtxt", "node 'X'", "2^63-1")


def test_recorded_shape_contradicting_a_const(tmp_path):
    refused(tmp_path, bad_inputs.wrong_rank(tmp_path), "node 'weight_y'", "[7]")


def test_matmul_of_a_vector_names_the_node(tmp_path):
    """A placeholder of rank 1 feeding a MatMul: the cost model names the MatMul (inspect needs no shapes)."""
    path = bad_inputs.edited_linreg(
        tmp_path, "vector.pbtxt", "size: -1\n        }\n        dim {\n          size: 1\n", "size: 3\n"
    )
    refused(tmp_path, path, "MatMul", "[3]", commands=COMMANDS[1:])


def test_calls_nested_too_deep(tmp_path):
    refused(
        tmp_path, bad_inputs.nested_calls(tmp_path, 1200), "deep_call_root", "1200 nested", "deep_fn_0 -> deep_fn_1"
    )


def test_calls_nested_as_deep_as_allowed_work(tmp_path):
    path = bad_inputs.nested_calls(tmp_path, MAX_CALL_DEPTH)
    for command in COMMANDS:
        extra = ["-o", tmp_path / "out", "--force"] if command[0] == "partition" else []
        code, _, stderr = cli(*command, path, *extra)
        assert code == 0, (command, stderr)


@pytest.mark.parametrize(
    "build, words",
    [
        (bad_inputs.cyclic, ["cycle", "node 'Add'"]),
        (bad_inputs.dangling, ["node 'z'", "'ghost'", "not in the graph"]),
        (bad_inputs.duplicate_name, ["'MatMul'", "appears twice"]),
        (bad_inputs.missing_function, ["node 'call'", "no_such_function"]),
        (bad_inputs.invalid_dtype, ["node 'MatMul'", "DT_INVALID"]),
    ],
)
def test_invalid_graph(tmp_path, build, words):
    refused(tmp_path, build(tmp_path), *words)


def test_captured_object_out_of_range(tmp_path):
    """--placement device writes each captured variable's device into the object graph it indexes."""
    model = bad_inputs.captured_object_out_of_range(tmp_path)
    before = (model / "saved_model.pb").read_bytes()
    code, stdout, stderr = cli("partition", model, "--streams", 2, "--placement", "device", "-o", tmp_path / "out")
    assert code == 2 and len(stderr) == 1 and "captures object 1000000" in stderr[0], stderr
    assert (model / "saved_model.pb").read_bytes() == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "value, shown", [("f: 1.0", "1.0"), ('s: "1"', "b'1'"), ("list { i: 1 }", "list"), ("i: -3", "-3")]
)
def test_stream_id_that_is_not_a_stream(tmp_path, value, shown):
    refused(tmp_path, bad_inputs.float_stream_id(tmp_path, value), "_stream_id", shown)


def test_v1_while_loop_back_edge_is_not_a_cycle(tmp_path):
    """stage_tf1 holds a tf.while_loop: its NextIteration -> Merge edge closes the only cycle."""
    for command in COMMANDS:
        extra = ["-o", tmp_path / "out", "--force"] if command[0] == "partition" else []
        code, _, stderr = cli(*command, SAMPLES / "stage_tf1", *extra)
        assert code == 0, (command, stderr)


def test_two_runs_write_the_same_bytes(msopt, tmp_path):
    """Protobuf map order differs between processes: the output must not."""
    digests = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        result = msopt("partition", SAMPLES / "deepfm_tf2", "--streams", 2, "-o", out)
        assert result.returncode == 0, result.stderr
        digests.append((out / "saved_model.pb").read_bytes())
    assert digests[0] == digests[1]
