"""msopt.stream: DeepRec's tf.stream semantics on tf.compat.v1 graphs, the session config, and the seed's example end to end."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, run_msopt

pytestmark = pytest.mark.tf

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1

import msopt  # noqa: E402


def stream_of(op):
    try:
        return op.get_attr("_stream_id")
    except ValueError:
        return None


def test_import_msopt_does_not_import_tensorflow():
    code = "import sys, msopt; s = msopt.stream; print('tensorflow' in sys.modules, callable(s))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.split() == ["False", "True"], done.stderr


def test_nesting_innermost_wins_and_colocation_takes_the_stream():
    graph = tf.Graph()
    with graph.as_default():
        with msopt.stream(0):  # the seed's interface example, unchanged but for the module name
            a = v1.placeholder(tf.float32, [None, 1], name="a")
            with msopt.stream(1):
                b = v1.placeholder(tf.float32, [None, 1], name="b")
            c = tf.constant([1, 2, 3, 4], tf.float32, [4, 1], name="c")
        with v1.colocate_with(a):
            d = tf.constant([5, 6, 7, 8], tf.float32, [4, 1], name="d")
        outside = tf.add(c, d, name="outside")
        with msopt.stream(1), v1.colocate_with(b.op):
            with msopt.stream(0):
                e = tf.identity(b, name="e")  # colocated with b: b's stream, whatever the block says
    assert [stream_of(t.op) for t in (a, b, c, d, outside, e)] == [0, 1, 0, 0, None, 1]


def test_same_function_under_both_names_and_bad_ids():
    from msopt.stream import stream

    graph = tf.Graph()
    with graph.as_default():
        with stream(3):
            x = tf.constant(1.0)
        with msopt.stream(2, graph=graph):
            y = tf.constant(2.0)
    assert (stream_of(x.op), stream_of(y.op)) == (3, 2)
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError):
            with msopt.stream(bad):
                pass


def test_gradients_colocated_with_ops_take_their_stream():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 1])
        with msopt.stream(1):
            w = tf.Variable([[2.0]], name="w")
            y = tf.matmul(x, w, name="y")
        (grad,) = v1.gradients(tf.reduce_sum(y), [w], colocate_gradients_with_ops=True)
    assert stream_of(grad.op) == 1 and stream_of(y.op) == 1


def test_place_moves_groups_and_sets_devices():
    graph = tf.Graph()
    with graph.as_default():
        w = tf.Variable([[2.0]], name="w")  # created outside any block
        x = v1.placeholder(tf.float32, [None, 1], name="x")
        with msopt.stream(1):
            y = tf.matmul(x, w, name="y")  # reads w on stream 1
    merges = msopt.stream.place(graph, streams=2, device_type="cpu")
    assert y.op.device == "/device:CPU:1"
    assert w.op.device == "/device:CPU:1" and stream_of(w.op) == 1  # the variable follows its reader
    assert any("resource" in m["constraint"] for m in merges)
    with pytest.raises(ValueError, match="outside"):
        msopt.stream.place(graph, streams=1)


def test_session_config_is_the_stock_equivalent():
    base = v1.ConfigProto(allow_soft_placement=True)
    cpu = msopt.stream.session_config(4, device_type="cpu", config=base)
    assert cpu.device_count["CPU"] == 4 and cpu.allow_soft_placement and "CPU" not in base.device_count
    gpu = msopt.stream.session_config(3, memory_limit_mb=1000)
    assert list(gpu.gpu_options.experimental.virtual_devices[0].memory_limit_mb) == [1000.0] * 3
    off = msopt.stream.session_config(4, use_multi_stream=False)
    assert off == v1.ConfigProto()
    with pytest.raises(ValueError):
        msopt.stream.session_config(0)


def run_example(*args):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "deeprec_linreg.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def example_runs():
    return (
        run_example("--device-type", "cpu", "--steps", "300", "--json"),
        run_example("--device-type", "cpu", "--steps", "300", "--json", "--no-streams"),
    )


def test_example_trains_to_the_same_losses_as_without_streams(example_runs):
    streams, plain = example_runs
    assert streams["losses"] == plain["losses"] and len(streams["losses"]) == 3
    assert streams["final_loss"] == plain["final_loss"] < streams["losses"][0]
    assert (streams["w_x"], streams["b"], streams["w_y"]) == (plain["w_x"], plain["b"], plain["w_y"])


def test_example_runs_each_stream_on_its_own_device(example_runs):
    streams, plain = example_runs
    ran = streams["executed_devices"]
    assert streams["partition_graphs"] == 2 and plain["partition_graphs"] == 1
    assert ran["weight_y"].endswith("CPU:1") and ran["MatMul_1"].endswith("CPU:1")
    assert ran["GradientDescent/update_weight_y/ResourceApplyGradientDescent"].endswith("CPU:1")
    assert ran["weight_x"].endswith("CPU:0") and ran["MatMul/ReadVariableOp"].endswith("CPU:0")


def test_example_cli_prints_the_seed_output():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "deeprec_linreg.py"), "--device-type", "cpu", "--steps", "101"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Step:0, loss==") and lines[-1].startswith("Linear Regression Model: Z=")


def test_streams_written_by_msopt_stream_survive_partition_policy_none(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 2], name="x")
        with msopt.stream(1):
            y = tf.multiply(x, 3.0, name="y")
        tf.add(y, 1.0, name="z")
    path = tmp_path / "g.pbtxt"
    tf.io.write_graph(graph.as_graph_def(), str(tmp_path), "g.pbtxt")
    done = run_msopt("partition", path, "-n", "2", "--policy", "none", "-o", tmp_path / "out.pbtxt", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes_per_stream"][1] >= 1
