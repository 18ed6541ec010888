"""msopt run: streams as logical devices, comparison, traces and costs, inputs, the stage pipeline (real TensorFlow)."""

import json

import numpy as np
import pytest
from conftest import SAMPLES, run_msopt

from msopt import emit
from msopt.graph.view import GraphView
from msopt.load import load

pytestmark = pytest.mark.tf

COMPUTE_OPS = {"Conv2D", "MatMul", "BiasAdd", "Relu", "MaxPool", "AddV2", "Add", "Reshape", "Mean", "Pack"}


def four_stream_copy(src, out):
    """``src`` with its compute ops dealt round-robin onto streams 0..3 (written with _stream_id attributes)."""
    model = load(src)
    view = GraphView(model.graph_def)
    nodes = [n for n in view.real_nodes() if n.op in COMPUTE_OPS and ("_serve_" in n.function or not n.function)]
    partition = {n.key: k % 4 for k, n in enumerate(nodes)}
    emit.write(model, partition, out)
    return out, partition


@pytest.fixture(scope="module")
def towers4(tmp_path_factory):
    return four_stream_copy(SAMPLES / "towers_tf2", tmp_path_factory.mktemp("towers") / "towers_tf2_ms4")


def run_json(*args, code=0, **kwargs):
    done = run_msopt("run", *args, "--json", **kwargs)
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout) if code == 0 else done


def test_four_cpu_streams_equal_the_plain_run_and_each_stream_runs_on_its_device(towers4, tmp_path):
    model, partition = towers4
    trace, costs, saved = tmp_path / "trace.json", tmp_path / "costs.json", tmp_path / "out.npz"
    doc = run_json(
        model,
        "--streams",
        4,
        "--device",
        "cpu",
        "--iterations",
        5,
        "--warmup",
        1,
        "--records",
        2,
        "--compare-to",
        SAMPLES / "towers_tf2",
        "--trace",
        trace,
        "--profile",
        costs,
        "--save-outputs",
        saved,
    )
    assert doc["devices"] == [f"/device:CPU:{k}" for k in range(4)]
    assert doc["compare"]["ok"] and doc["compare"]["records"] == 2
    assert doc["steps"] == 5 and doc["latency_ms"]["p50"] > 0 and doc["throughput"]["records_per_s"] > 0
    plain = tmp_path / "plain.npz"
    run_json(SAMPLES / "towers_tf2", "--device", "cpu", "--iterations", 1, "--records", 2, "--save-outputs", plain)
    with np.load(saved) as a, np.load(plain) as b:
        assert sorted(a.files) == ["logits_0", "logits_1", "mean_logits"]
        assert all(a[k].shape[0] == 2 and a[k].tobytes() == b[k].tobytes() for k in a.files)

    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    ran = {e["name"]: (tracks[e["pid"]], e["args"]["op"]) for e in events if e["ph"] == "X"}
    view = GraphView(load(model).graph_def)
    # Nodes that ran as themselves (a oneDNN kernel of the same op counts; a fusion of several nodes does not).
    unfused = [key for key in partition if key in ran and ran[key][1].endswith(view.nodes[key].op)]
    assert len(unfused) >= 8
    assert all(ran[key][0] == f"/device:CPU:{partition[key]}" for key in unfused)
    assert {ran[key][0] for key in unfused} == {f"/device:CPU:{k}" for k in range(4)}

    profile = json.loads(costs.read_text())
    assert profile["unit"] == "us" and set(profile["ops"]) <= set(view.nodes)
    assert all(us >= 0 for us in profile["ops"].values()) and sum(profile["ops"].values()) > 0
    assert doc["profile"]["ops"] == len(profile["ops"])
    planned = run_msopt("partition", SAMPLES / "towers_tf2", "-n", 2, "--costs", costs, "-o", tmp_path / "p", "--json")
    assert planned.returncode == 0, planned.stderr  # the costs file is what msopt partition --costs reads


def test_four_cpu_streams_on_a_tf1_graph_equal_the_plain_run(tmp_path):
    model, partition = four_stream_copy(SAMPLES / "towers_tf1", tmp_path / "towers_tf1_ms4")
    trace = tmp_path / "trace.json"
    doc = run_json(
        model,
        "--streams",
        4,
        "--device",
        "cpu",
        "--iterations",
        3,
        "--records",
        2,
        "--compare-to",
        SAMPLES / "towers_tf1",
        "--trace",
        trace,
    )
    assert doc["compare"]["ok"] and len(partition) > 20
    used = {device for devices in doc["executed"]["stream_to_device"].values() for device in devices}
    assert used == {f"/device:CPU:{k}" for k in range(4)}


def test_tf1_stream_ids_become_devices(tmp_path):
    trace = tmp_path / "t.json"
    doc = run_json(
        SAMPLES / "linreg_tf1",
        "--device",
        "cpu",
        "--iterations",
        3,
        "--compare-to",
        SAMPLES / "linreg_tf1",
        "--trace",
        trace,
    )  # the original runs without placement: all on CPU:0
    assert doc["streams"] == 2 and doc["compare"]["ok"]
    assert doc["executed"]["stream_to_device"]["1"].get("/device:CPU:1", 0) >= 1
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert any(e["name"] == "MatMul_1" and e["args"]["device"] == "/device:CPU:1" for e in events)


def test_stream_ids_beyond_streams_are_bad_input():
    done = run_json(SAMPLES / "linreg_tf1", "--streams", 1, "--device", "cpu", code=2)
    assert done.stderr.count("\n") == 1 and "outside [0, 1)" in done.stderr


STAGE_BOUNDARY = ",".join(
    [
        "preprocess/StringToHashBucketFast:0",
        "preprocess/StringToHashBucketFast_1:0",
        "preprocess/StringToHashBucketFast_2:0",
        "preprocess/stack:0",
        "preprocess/StringSplit_1/strided_slice:0",
        "preprocess/StringSplit_1/RaggedFromValueRowIds/RowPartitionFromValueRowIds/bincount/DenseBincount:0",
    ]
)


def test_stage_pipeline_gives_the_unpipelined_results_in_order(tmp_path):
    doc = run_json(
        SAMPLES / "stage_tf1",
        "--device",
        "cpu",
        "--stage",
        "--stage-boundary",
        STAGE_BOUNDARY,
        "--records",
        7,
        "--iterations",
        30,
        "--warmup",
        0,
        "--stage-threads",
        3,
        "--stage-capacity",
        2,
    )
    stage = doc["stage"]
    assert stage["records"] == 30 and stage["identical_to_unpipelined"]
    assert stage["ops"]["upstream"] > 0 and stage["ops"]["downstream"] > 0 and stage["ops"]["shared"] == 0
    assert 1 <= stage["peak_buffered"] <= 2
    assert stage["upstream_blocked_s"] >= 0 and stage["downstream_blocked_s"] >= 0


def test_stage_boundary_found_by_the_stage_rule():
    doc = run_json(SAMPLES / "stage_tf1", "--device", "cpu", "--stage", "--records", 3, "--iterations", 6)
    stage = doc["stage"]
    assert "preprocess/StringToHashBucketFast:0" in stage["boundary"] and stage["identical_to_unpipelined"]
    assert stage["ops"]["shared"] == 0 and stage["records"] == 6


def test_stage_pipeline_on_a_tf2_model_cuts_a_frozen_copy(tmp_path):
    doc = run_json(
        SAMPLES / "stage_tf2",
        "--device",
        "cpu",
        "--stage",
        "--stage-boundary",
        "preprocess/StringToHashBucketFast,preprocess/StringToHashBucketFast_1,"
        "preprocess/StringToHashBucketFast_2,preprocess/stack,preprocess/StringSplit_1/strided_slice,"
        "model/Size,model/strided_slice",
        "--records",
        4,
        "--iterations",
        12,
        "--stage-threads",
        2,
        "--stage-capacity",
        3,
    )
    stage = doc["stage"]
    assert stage["graph"] == "frozen copy of the TF2 signature" and stage["identical_to_unpipelined"]
    assert stage["records"] == 12 and stage["ops"]["shared"] == 0 and stage["ops"]["upstream"] > 20
    assert stage["max_abs_diff_to_model"] < 1e-6  # freezing weights into constants may move the last bit
    found = run_json(SAMPLES / "stage_tf2", "--device", "cpu", "--stage", "--records", 2, "--iterations", 4)["stage"]
    assert found["identical_to_unpipelined"] and "StatefulPartitionedCall/preprocess/stack:0" in found["boundary"]


def test_stage_boundary_that_does_not_cut_is_bad_input():
    done = run_json(SAMPLES / "stage_tf1", "--device", "cpu", "--stage", "--stage-boundary", "no/such/op:0", code=2)
    assert "no tensor 'no/such/op:0' in the model" in done.stderr and done.stderr.count("\n") == 1


# -- bad input ---------------------------------------------------------------------------------------
def test_unknown_signature_names_the_available_ones():
    done = run_json(SAMPLES / "linreg_tf2", "--signature", "nope", code=2)
    assert done.stderr == "msopt: error: unknown signature 'nope'; available: serving_default\n"


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"X": np.zeros((2, 1), np.float32)}, "no array for input 'Y'"),
        (
            {"X": np.zeros((2, 1), np.float64), "Y": np.zeros((2, 1), np.float32)},
            "input 'X': expected dtype float, given float64",
        ),
        (
            {"X": np.zeros((2, 3), np.float32), "Y": np.zeros((2, 1), np.float32)},
            "input 'X': expected shape [?, 1], given [2, 3]",
        ),
    ],
)
def test_inputs_that_do_not_fit_the_signature(tmp_path, arrays, message):
    npz = tmp_path / "in.npz"
    np.savez(npz, **arrays)
    done = run_json(SAMPLES / "linreg_tf1", "--inputs", npz, code=2)
    assert message in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_inputs_from_npz_are_used(tmp_path):
    npz, out = tmp_path / "in.npz", tmp_path / "out.npz"
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    np.savez(npz, X=x, Y=2 * x)
    doc = run_json(SAMPLES / "linreg_tf1", "--device", "cpu", "--inputs", npz, "--iterations", 2, "--save-outputs", out)
    assert doc["batch_size"] == 4 and doc["inputs"]["source"] == str(npz)
    with np.load(out) as saved:
        z = saved["z"][0]
    assert z.shape == (4, 1) and np.all(np.diff(z[:, 0]) != 0)


def test_model_with_ops_that_are_not_installed():
    done = run_json(SAMPLES / "custom_op_tf1", "--device", "cpu", code=2)
    assert "Op type not registered" in done.stderr and done.stderr.count("\n") == 1


def test_gpu_asked_where_tensorflow_sees_none():
    done = run_json(SAMPLES / "linreg_tf1", "--device", "gpu", code=2)
    assert "--device gpu: TensorFlow sees no GPU" in done.stderr and done.stderr.count("\n") == 1


def test_help_ends_with_an_example():
    done = run_msopt("run", "--help")
    assert done.returncode == 0 and "Example:" in done.stdout and "msopt run" in done.stdout.split("Example:")[1]
