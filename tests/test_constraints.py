"""The placement constraints: each one shown needed (TensorFlow silently places the plan otherwise) and sufficient.

Every model here runs with hard placement on N logical CPU devices; the executed partition
graphs (RunMetadata) say where each op really ran.
"""

import json
import subprocess
import sys

import pytest
from conftest import SAMPLES

from msopt import emit
from msopt.graph.host_only import STRING_ATTRS, host_only, is_host_op, says_string
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.planning.const_copies import const_copies
from msopt.planning.constraints import apply

pytestmark = pytest.mark.tf

# Runs a SavedModel's serving signature in a fresh process; prints where each op ran.
PROBE = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf
from tensorflow.python.eager import context
path, devices, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
v1 = tf.compat.v1
rng = np.random.default_rng(0)
def value(dtype, shape):
    shape = [3 if d is None else d for d in shape]
    if dtype == tf.string:
        return np.array([b"ab,c|d,7"] * int(np.prod(shape)), dtype=object).reshape(shape)
    if dtype.is_integer:
        return rng.integers(0, 10, size=shape).astype(dtype.as_numpy_dtype)
    return rng.standard_normal(shape).astype(dtype.as_numpy_dtype)
if mode == "tf1":
    graph = tf.Graph()
    session = v1.Session(graph=graph, config=v1.ConfigProto(device_count={"CPU": devices}, allow_soft_placement=False))
    with graph.as_default():
        meta = v1.saved_model.loader.load(session, ["serve"], path)
        sig = meta.signature_def["serving_default"]
        tensors = [graph.get_tensor_by_name(sig.inputs[k].name) for k in sorted(sig.inputs)]
        feeds = {t: value(t.dtype, t.shape.as_list()) for t in tensors}
        fetch = {k: graph.get_tensor_by_name(i.name) for k, i in sig.outputs.items()}
        metadata = v1.RunMetadata()
        out = session.run(fetch, feeds, options=v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    graphs = list(metadata.partition_graphs)
else:  # tf2: tf.saved_model.load; "tf2-devices" asks it to honour saved variable devices
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
    honour = mode == "tf2-devices"
    tf.config.set_soft_device_placement(honour)
    policy = tf.saved_model.experimental.VariablePolicy.SAVE_VARIABLE_DEVICES
    loaded = tf.saved_model.load(path, options=tf.saved_model.LoadOptions(experimental_variable_policy=policy) if honour else None)
    fn = loaded.signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    feeds = {k: tf.constant(value(specs[k].dtype, specs[k].shape.as_list())) for k in sorted(specs)}
    context.enable_run_metadata()
    out = fn(**feeds)
    metadata = context.export_run_metadata()
    graphs = [g for f in metadata.function_graphs for g in f.partition_graphs]
executed = {}
for g in graphs:
    for n in g.node:
        executed.setdefault(n.name, int(n.device.rpartition(":")[2]))
print(json.dumps({"executed": executed, "partitions": len(graphs),
                  "recv": [n.name for g in graphs for n in g.node if n.op == "_Recv"],
                  "outputs": {k: np.asarray(v).tolist() for k, v in out.items()}}))
"""


def run_probe(path, devices=2, mode="tf1"):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), str(devices), mode], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "exit %d" % done.returncode}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write(tmp_path, name, plan, label, copies=None):
    model = load(SAMPLES / name)
    out = tmp_path / f"{name}_{label}"
    emit.write(model, plan, out, "device", "cpu", const_copies=copies)
    return out


def mismatches(plan, executed):
    """Planned nodes that ran somewhere else (function-body nodes matched by their inlined name)."""
    wrong = {}
    for key, stream in plan.items():
        name = key.split(":", 1)[1] if ":" in key else key
        ran = [d for n, d in executed.items() if n == name or n.endswith("/" + name)]
        if ran and ran[0] != stream:
            wrong[key] = ran[0]
    return wrong


# -- colocation ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def linreg_colocation(sample_view, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("coloc")
    _, view = sample_view("linreg_tf1")
    raw = {"weight_x/read": 1}  # a rule moved the variable's read, not the variable
    plan, merges = apply(view, raw, 2)
    return (
        raw,
        plan,
        merges,
        run_probe(write(tmp, "linreg_tf1", raw, "raw")),
        run_probe(write(tmp, "linreg_tf1", plan, "plan")),
    )


def test_colocation_without_constraint_tensorflow_ignores_the_plan(linreg_colocation):
    raw, _, _, before, _ = linreg_colocation
    assert "error" not in before
    assert mismatches(raw, before["executed"]) == {"weight_x/read": 0}  # silently left with its group on CPU:0


def test_colocation_group_moves_whole_and_runs_where_planned(linreg_colocation):
    raw, plan, merges, before, after = linreg_colocation
    group = {"weight_x", "weight_x/read", "weight_x/Assign", "weight_x/Initializer/zeros", "save/Assign_1"}
    assert all(plan[k] == 1 for k in group)
    assert any("colocation" in m["constraint"] and "weight_x" in m["moved"] for m in merges)
    assert mismatches(plan, after["executed"]) == {}
    assert after["executed"]["weight_x/read"] == 1 and after["executed"]["weight_x"] == 1
    assert after["outputs"] == before["outputs"]


# -- resources and references ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def stage_resource(sample_view, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("res")
    _, view = sample_view("stage_tf1")
    raw = {"model/MatMul/ReadVariableOp": 1, "stage/dense_1/kernel": 0}  # read and variable on different streams
    plan, merges = apply(view, raw, 2)
    return (
        raw,
        plan,
        merges,
        run_probe(write(tmp, "stage_tf1", raw, "raw")),
        run_probe(write(tmp, "stage_tf1", plan, "plan")),
    )


def test_resource_without_constraint_tensorflow_moves_the_read(stage_resource):
    raw, _, _, before, _ = stage_resource
    assert mismatches(raw, before["executed"]) == {"model/MatMul/ReadVariableOp": 0}


def test_resource_variable_follows_its_reader(stage_resource):
    raw, plan, merges, before, after = stage_resource
    assert plan["stage/dense_1/kernel"] == 1  # the variable goes where its consumer is
    assert plan["stage/dense_1/kernel/Assign"] == 1
    assert any("resource" in m["constraint"] and "stage/dense_1/kernel" in m["moved"] for m in merges)
    assert mismatches(plan, after["executed"]) == {}
    assert after["outputs"] == before["outputs"]


def test_embedding_table_goes_where_most_lookups_go(sample_view):
    _, view = sample_view("deepfm_tf1")
    table = "input_layer/C10_embedding/embedding_weights"
    raw = {
        f"{table}/Initializer/zeros": 2,
        f"{table}/Read/ReadVariableOp": 2,
        "input_layer/C10_embedding/embedding_lookup": 3,
    }
    fallback = {f"{table}/Initializer/zeros", f"{table}/Read/ReadVariableOp"}  # placed by a default, not a rule
    plan, _ = apply(view, raw, 4, type("Options", (), {"fallback": fallback})())
    assert plan[table] == 3 and plan[f"{table}/Initializer/zeros"] == 3 and plan[f"{table}/Read/ReadVariableOp"] == 3


def test_tf2_resource_arguments_are_followed_to_the_caller(sample_view):
    _, view = sample_view("linreg_tf2")
    read = "__inference_serve_173:MatMul_1/ReadVariableOp"
    plan, merges = apply(view, {read: 1}, 2)
    assert plan["weight_y"] == 1  # the main graph's VarHandleOp behind the function argument
    assert plan["weight_y/Read/ReadVariableOp"] == 1
    assert plan.get("weight_x", 0) == 0
    assert any("weight_y" in m["moved"] for m in merges)


@pytest.fixture(scope="module")
def linreg_tf2_runs(sample_view, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tf2")
    _, view = sample_view("linreg_tf2")
    raw = {k: s for k, s in ((n.key, n.stream) for n in view.real_nodes()) if s is not None}  # its tf.stream ids
    plan, _ = apply(view, raw, 2)
    raw_path, plan_path = write(tmp, "linreg_tf2", raw, "raw"), write(tmp, "linreg_tf2", plan, "plan")
    return (
        raw,
        plan,
        plan_path,
        {
            "raw": run_probe(raw_path, mode="tf2-devices"),
            "plan_default_load": run_probe(plan_path, mode="tf2"),
            "plan": run_probe(plan_path, mode="tf2-devices"),
        },
    )


def test_tf2_captured_variable_device_is_written_and_honoured(linreg_tf2_runs):
    raw, plan, plan_path, runs = linreg_tf2_runs
    read = "__inference_serve_173:MatMul_1/ReadVariableOp"
    assert raw[read] == 1 and plan[read] == 1
    objects = load(plan_path).meta_graph.object_graph_def
    devices = {n.variable.name: n.variable.device for n in objects.nodes if n.WhichOneof("kind") == "variable"}
    assert devices["weight_y"] == "/device:CPU:1"
    # Without the constraint the variable stays on CPU:0 and TensorFlow moves the read there.
    assert mismatches({read: 1}, runs["raw"]["executed"]) == {read: 0}
    # tf.saved_model.load ignores saved variable devices unless asked (LoadOptions variable policy).
    assert mismatches({read: 1}, runs["plan_default_load"]["executed"]) == {read: 0}
    assert mismatches({read: 1}, runs["plan"]["executed"]) == {}
    assert runs["plan"]["outputs"] == runs["raw"]["outputs"]


# -- TF1 control-flow frames -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def stage_frame(sample_view, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("frame")
    _, view = sample_view("stage_tf1")
    body = [n.key for n in view.real_nodes() if n.name.startswith("model/while/")]
    raw = {k: (1 if k in ("model/while/Merge_1", "model/while/Switch_1", "model/while/Tanh") else 0) for k in body}
    plan, merges = apply(view, raw, 2)
    return (
        body,
        raw,
        plan,
        merges,
        run_probe(write(tmp, "stage_tf1", raw, "raw")),
        run_probe(write(tmp, "stage_tf1", plan, "plan")),
    )


def test_frame_split_across_streams_is_not_run_as_planned(stage_frame):
    _, raw, _, _, before, _ = stage_frame
    assert "error" not in before
    assert mismatches(raw, before["executed"]) != {}


def test_frame_shares_one_stream_and_runs_there(stage_frame):
    body, raw, plan, merges, before, after = stage_frame
    assert len({plan[k] for k in body}) == 1
    assert plan["model/while/Enter"] == plan["model/while/Exit_1"] == plan["model/while/NextIteration"]
    assert any("frame" in m["constraint"] for m in merges)
    assert mismatches(plan, after["executed"]) == {}
    assert after["outputs"] == before["outputs"]


def partition_verified(msopt, tmp_path, name, rules_text):
    """Partition sample ``name`` with a rules file onto 2 CPU devices, --verify; returns the report."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(rules_text)
    done = msopt(
        "partition",
        SAMPLES / name,
        "-n",
        "2",
        "--rules",
        rules,
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        tmp_path / "out",
        "--verify",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_functional_while_bodies_are_partitioned_on_their_own(msopt, tmp_path):
    doc = partition_verified(msopt, tmp_path, "stage_tf2", 'rules:\n  - function: ".*while_body.*"\n    stream: 1\n')
    assert doc["rules"][0]["applied"] > 0 and doc["verify"]["ok"]
    body = [f for f in doc["functions"] if "while_body" in f]
    assert body and all(doc["functions"][f]["nodes_per_stream"][1] > 0 for f in body)


# -- host-only ops ---------------------------------------------------------------------------------
def test_string_and_kernel_less_ops_keep_their_device(sample_view):
    _, view = sample_view("stage_tf1")
    raw = {n.key: 1 for n in view.real_nodes()}
    plan, merges = apply(view, raw, 2)
    host = host_only(view)
    ops = {view.nodes[k].op for k in host}
    assert {"StringSplitV2", "StringToHashBucketFast", "StringToNumber", "DenseBincount", "SaveV2"} <= ops
    assert not host & set(plan)
    assert merges[0]["constraint"] == "host_only" and set(merges[0]["moved"]) == host
    placeholder = next(n for n in view.real_nodes() if n.op == "Placeholder" or n.op == "PlaceholderWithDefault")
    assert is_host_only(placeholder) == (placeholder.proto.attr["dtype"].type == 7)


def is_host_only(node):
    """Whether ``node`` keeps its device, read from its own attributes: what host_only must agree with."""
    attr = node.proto.attr
    strings = (name for name in STRING_ATTRS if name in attr)
    return is_host_op(node.op) or any(says_string(attr[name], attr[name].WhichOneof("value")) for name in strings)


@pytest.mark.parametrize("name", ["stage_tf2", "deepfm_tf2", "stage_tf1"])
def test_the_views_string_types_are_those_the_attributes_say(sample_view, name):
    """With a library the view reads every node's attributes for its calls and notes the string-typed ones there
    (without one, in one pass when first asked); host_only then tests op types and asks that set: the nodes are
    those whose attributes, read one by one, say so."""
    _, view = sample_view(name)
    assert (view.string_typed is not None) == ("stage_tf1" != name)
    read = {n.key for n in view.real_nodes() if is_host_only(n)}
    assert host_only(view) == read and len(read) >= 3
    if view.string_typed is not None:
        assert view.string_typed and view.string_typed <= read


def test_host_only_plan_verifies(msopt, tmp_path):
    doc = partition_verified(msopt, tmp_path, "stage_tf1", "rules:\n  - scope: preprocess/\n    stream: 1\n")
    assert doc["verify"]["ok"]
    host = [m for m in doc["constraint_merges"] if m["constraint"] == "host_only"]
    assert host and any("StringSplit" in k for k in host[0]["moved"])
    out = load(tmp_path / "out")
    assert all(not n.device for n in out.graph_def.node if "StringSplit" in n.op)


# -- Const copies ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deepfm_consts(sample_view, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("const")
    _, view = sample_view("deepfm_tf1")
    raw = {n.key: 1 for n in view.real_nodes() if n.op == "FloorMod"}  # the hashing on stream 1,
    raw.update({n.key: 0 for n in view.real_nodes() if n.name.endswith("_embedding/Const")})  # its modulus pinned on 0
    plan, _ = apply(view, raw, 2)
    _, copies = const_copies(view, plan)
    return (
        plan,
        copies,
        run_probe(write(tmp, "deepfm_tf1", plan, "copies", copies)),
        run_probe(write(tmp, "deepfm_tf1", plan, "single")),
    )


def test_const_copied_into_the_consuming_stream(deepfm_consts, tmp_path):
    plan, copies, with_copies, without = deepfm_consts
    assert copies == {f"input_layer/C{k}_embedding/Const": [1] for k in range(1, 25)}
    const = "input_layer/C7_embedding/Const"
    model = load(write(tmp_path, "deepfm_tf1", plan, "check", copies))
    nodes = {n.name: n for n in model.graph_def.node}
    copy = nodes[emit.copy_name(const, 1)]
    assert copy.device == "/device:CPU:1" and copy.attr["_stream_id"].i == 1
    assert nodes["input_layer/C7_embedding/FloorMod"].input[1] == emit.copy_name(const, 1)
    # Without copies some of the pinned Consts are sent to the consuming device (a _Recv each);
    # with the copies none is.
    assert with_copies["partitions"] == without["partitions"] == 2
    assert not any("_embedding/Const" in r for r in with_copies["recv"])
    assert any("_embedding/Const" in r for r in without["recv"])
    assert with_copies["outputs"] == without["outputs"]


def test_a_const_read_on_one_other_stream_may_move_there(deepfm_consts, sample_view, tmp_path):
    """The 24 pinned Consts are read on stream 1 only: unless a constraint links them (``fixed``), each may move
    there instead of being copied. Written so, none reaches stream 1 through a _Send/_Recv pair, and the outputs are
    the same."""
    plan, copies, with_copies, without = deepfm_consts
    _, view = sample_view("deepfm_tf1")
    moves, listed = const_copies(view, plan, fixed=set())
    assert moves == {key: 1 for key in copies} and listed == copies
    pinned = "input_layer/C7_embedding/Const"
    assert pinned not in const_copies(view, plan, fixed={pinned})[0]
    assert const_copies(view, plan)[0] == {}  # no ``fixed``: no moves
    moved = run_probe(write(tmp_path, "deepfm_tf1", {**plan, **moves}, "moved"))
    assert moved["partitions"] == 2 and not any("_embedding/Const" in r for r in moved["recv"])
    assert not mismatches(moves, moved["executed"])  # a moved Const that still runs, runs on its new device
    assert moved["outputs"] == with_copies["outputs"] == without["outputs"]


def test_a_const_read_on_two_other_streams_is_copied_not_moved():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        c = tf.constant([1.0, 2.0], name="c")
        tf.add(x, c, name="a")
        tf.multiply(x, c, name="b")
    view = GraphView(graph.as_graph_def())
    moves, copies = const_copies(view, {"x": 0, "c": 0, "a": 1, "b": 2}, fixed=set())
    assert moves == {} and copies == {"c": [1, 2]}
    moves, copies = const_copies(view, {"x": 0, "c": 0, "a": 2, "b": 2}, fixed=set())
    assert moves == {"c": 2} and copies == {"c": [2]}
    assert const_copies(view, {"x": 0, "a": 2, "b": 2}, fixed=set())[0] == {}  # a Const outside the plan stays out


def test_const_copies_verify_and_no_const_dup_flag(msopt, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - op: FloorMod\n    stream: 1\n")
    common = (
        "partition",
        SAMPLES / "deepfm_tf1",
        "-n",
        "2",
        "--rules",
        rules,
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "--json",
    )
    done = msopt(*common, "-o", tmp_path / "dup", "--verify")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["const_copies"]) == 24 and json.loads(done.stdout)["verify"]["ok"]
    done = msopt(*common, "-o", tmp_path / "single", "--no-const-dup")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["const_copies"] == {}
    assert not any("_ms_copy_" in n.name for n in load(tmp_path / "single").graph_def.node)


# -- stream range ----------------------------------------------------------------------------------
def test_stream_out_of_range_names_node_and_rule(msopt, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n  - scope: tower_0/\n    stream: 0\n  - name: second tower\n    scope: tower_1/\n    stream: 5\n"
    )
    done = msopt("partition", SAMPLES / "towers_tf1", "-n", "2", "--rules", rules, "-o", tmp_path / "out")
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("msopt: error: node 'tower_1/")
    assert "stream 5 from rule 2 (second tower)" in line and f"{rules}:4" in line and "[0, 2)" in line


@pytest.mark.slow
def test_tf_keras_model_plan_is_honoured_only_with_saved_variable_devices(msopt, mobilenet_v2, tmp_path):
    """A tf-keras model (one function per layer): every planned read runs where planned once the variables move."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        'rules:\n  - match: "block_1[0-6].*"\n    stream: 1\n  - op: [DepthwiseConv2dNative]\n    stream: 2\n'
    )
    out = tmp_path / "out"
    done = msopt(
        "partition",
        mobilenet_v2,
        "-n",
        "3",
        "--rules",
        rules,
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        out,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    view = GraphView(load(out).graph_def)
    planned = {
        n.key: n.stream
        for n in view.real_nodes()
        if n.stream is not None and not n.function.startswith("__inference__traced")
    }
    reads = {k: s for k, s in planned.items() if view.nodes[k].op == "ReadVariableOp" and s != 0}
    honoured, default = run_probe(out, devices=3, mode="tf2-devices"), run_probe(out, devices=3, mode="tf2")
    assert len(reads) > 50
    assert mismatches(planned, honoured["executed"]) == {}
    moved = mismatches(reads, default["executed"])  # default load: variables on CPU:0, and their reads with them
    assert len(moved) > 50 and set(moved.values()) == {0}


# -- fusable chains --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def towers_fusion(sample_view, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fusion")
    _, view = sample_view("towers_tf1")
    raw = {"tower_0/ConvNet/BiasAdd": 1}  # Conv2D and Relu stay on stream 0
    plan, merges = apply(view, raw, 2)
    return (
        raw,
        plan,
        merges,
        run_probe(write(tmp, "towers_tf1", raw, "raw")),
        run_probe(write(tmp, "towers_tf1", plan, "plan")),
    )


def test_fusable_chain_split_runs_fused_where_the_plan_did_not_say(towers_fusion):
    raw, _, _, before, _ = towers_fusion
    assert "error" not in before
    assert "tower_0/ConvNet/BiasAdd" not in before["executed"], "grappler fused the BiasAdd away"
    assert before["executed"]["tower_0/ConvNet/Relu"] == 0  # the planned stream 1 is lost


def test_fusable_chain_shares_one_stream_and_runs_there(towers_fusion):
    raw, plan, merges, before, after = towers_fusion
    chain = ("tower_0/ConvNet/Conv2D", "tower_0/ConvNet/BiasAdd", "tower_0/ConvNet/Relu")
    assert [plan[k] for k in chain] == [1, 1, 1]
    assert any("fusion" in m["constraint"] for m in merges)
    assert after["executed"]["tower_0/ConvNet/Relu"] == 1
    assert mismatches(plan, after["executed"]) == {}
    assert after["outputs"] == before["outputs"]
