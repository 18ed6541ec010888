"""The cost model: what runs, shapes (recorded, propagated, through calls), FLOPs and bytes, targets, measured costs."""

import json

import pytest
from conftest import SAMPLES

from msopt.errors import InputError
from msopt.graph import protos
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.simulator.cost import MIN_KERNEL_US, TARGETS, CostModel, load_costs


def node(g, name, op, inputs=(), dtype=1, **attrs):
    n = g.node.add(name=name, op=op)
    n.input.extend(inputs)
    n.attr["T"].type = dtype
    for key, value in attrs.items():
        if key == "shape":
            n.attr["dtype"].type = dtype
            for d in value:
                n.attr["shape"].shape.dim.add(size=d)
        elif key == "const":
            shape, values = value
            t = n.attr["value"].tensor
            t.dtype = 3  # int32
            for d in shape:
                t.tensor_shape.dim.add(size=d)
            t.int_val.extend(values)
        elif key in ("strides", "ksize"):
            n.attr[key].list.i.extend(value)
        elif key in ("padding", "data_format"):
            n.attr[key].s = value.encode()
        elif key.startswith("transpose"):
            n.attr[key].b = value
    return n


def filter_const(g, name, shape):
    n = g.node.add(name=name, op="Const")
    t = n.attr["value"].tensor
    t.dtype = 1
    for d in shape:
        t.tensor_shape.dim.add(size=d)
    n.attr["dtype"].type = 1
    return n


def model_of(g):
    view = GraphView(g)
    return view, {view.nodes[k].name: k for k in view.nodes}


def task(cm, key):
    return cm.tasks.key.index(key)


def test_conv_shape_and_flops_propagate_without_recorded_shapes():
    g = protos.GraphDef()
    node(g, "x", "Placeholder", shape=[-1, 8, 8, 3])
    filter_const(g, "w", [3, 3, 3, 16])
    node(g, "same", "Conv2D", ["x", "w"], strides=[1, 1, 1, 1], padding="SAME")
    node(g, "valid", "Conv2D", ["x", "w"], strides=[1, 2, 2, 1], padding="VALID")
    node(g, "pool", "MaxPool", ["same"], strides=[1, 2, 2, 1], ksize=[1, 2, 2, 1], padding="VALID")
    view, _ = model_of(g)
    cm = CostModel(view, None, target="v100", batch_size=2)
    same, valid, pool = (task(cm, k) for k in ("same", "valid", "pool"))
    assert cm.shapes[same] == [("float", [-1, 8, 8, 16])]
    assert cm.shapes[valid] == [("float", [-1, 3, 3, 16])]
    assert cm.shapes[pool] == [("float", [-1, 4, 4, 16])]
    assert cm.flops[same] == 2 * (2 * 8 * 8 * 16) * (3 * 3 * 3)
    assert cm.flops[pool] == (2 * 4 * 4 * 16) * 4
    assert cm.out_bytes[same] == [2 * 8 * 8 * 16 * 4]  # the unknown batch dimension is --batch-size
    assert cm.unknown_shapes == 0


def test_matmul_concat_and_broadcast_shapes():
    g = protos.GraphDef()
    node(g, "a", "Placeholder", shape=[-1, 32])
    filter_const(g, "w", [64, 32])
    node(g, "mm", "MatMul", ["a", "w"], transpose_b=True)
    node(g, "axis", "Const", dtype=3, const=([], [1]))
    node(g, "cat", "ConcatV2", ["mm", "mm", "axis"])
    filter_const(g, "bias", [128])
    node(g, "add", "AddV2", ["cat", "bias"])
    view, _ = model_of(g)
    cm = CostModel(view, None, target="v100", batch_size=5)
    assert cm.shapes[task(cm, "mm")][0][1] == [-1, 64]
    assert cm.flops[task(cm, "mm")] == 2 * 5 * 64 * 32
    assert cm.shapes[task(cm, "cat")][0][1] == [-1, 128]
    assert cm.shapes[task(cm, "add")][0][1] == [-1, 128]


def call_graph(call_twice=False):
    """main: x -> PartitionedCall(f) -> y, f(arg) = Relu(arg); no recorded shapes anywhere."""
    g = protos.GraphDef()
    node(g, "x", "Placeholder", shape=[-1, 1000])
    f = g.library.function.add()
    f.signature.name = "f"
    f.signature.input_arg.add(name="arg", type=1)
    f.signature.output_arg.add(name="out", type=1)
    body = f.node_def.add(name="relu", op="Relu")
    body.input.append("arg")
    body.attr["T"].type = 1
    f.ret["out"] = "relu:activations:0"
    calls = ["call", "call2"] if call_twice else ["call"]
    for name in calls:
        c = g.node.add(name=name, op="PartitionedCall")
        c.input.append("x" if name == "call" else "call")
        c.attr["f"].func.name = "f"
    node(g, "y", "Tanh", [calls[-1]])
    return g


def test_calls_are_inlined_and_shapes_flow_through_arguments():
    view = GraphView(call_graph())
    cm = CostModel(view, None, target="v100", batch_size=3)
    assert cm.tasks.key == ["x", "f:relu", "y"]
    relu, y = task(cm, "f:relu"), task(cm, "y")
    assert cm.tasks.inputs[relu] == [(0, 0)] and cm.tasks.inputs[y] == [(relu, 0)]
    assert cm.shapes[relu][0][1] == [-1, 1000] and cm.shapes[y][0][1] == [-1, 1000]
    assert cm.tasks.instances[cm.tasks.instance[relu]][0] == "call"
    assert cm.unknown_shapes == 0


def test_a_function_called_twice_runs_twice():
    view = GraphView(call_graph(call_twice=True))
    cm = CostModel(view, None, target="v100", batch_size=3)
    assert cm.tasks.key == ["x", "f:relu", "f:relu", "y"]
    first, second = 1, 2
    assert cm.tasks.inputs[second] == [(first, 0)]
    assert cm.time_us("f:relu") == pytest.approx(2 * cm.duration[first])


def test_only_the_signature_run_counts(sample_cost):
    model, view, cm = sample_cost("towers_tf2", target="h100", batch_size=1)
    ops = [cm.tasks.op[i] for i in range(len(cm))]
    assert ops.count("Conv2D") == 4  # two towers of two convolutions; the other traced copies and the saver do not run
    assert not any("traced" in k for k in cm.tasks.key)
    assert cm.signature == "serving_default" and cm.unknown_shapes == 0


def test_recorded_shapes_and_the_batch_dimension(sample_cost):
    model, view, small = sample_cost("towers_tf2", target="v100", batch_size=1)
    large = CostModel(view, model, target="v100", batch_size=256)
    conv = next(i for i in range(len(small)) if small.tasks.op[i] == "Conv2D")
    assert small.shapes[conv][0][1] == [-1, 28, 28, 8]
    assert large.out_bytes[conv][0] == 256 * small.out_bytes[conv][0]
    assert large.flops[conv] == 256 * small.flops[conv]
    assert large.duration[conv] > small.duration[conv]


def test_no_kernel_ops_are_free_and_kernels_take_at_least_the_minimum(sample_cost):
    model, view, cm = sample_cost("linreg_tf1", target="h100")
    for i in range(len(cm)):
        if cm.tasks.op[i] in ("Const", "Identity", "Placeholder", "VariableV2", "NoOp"):
            assert not cm.kernel[i] and cm.duration[i] == 0
        if cm.kernel[i]:
            assert cm.duration[i] >= MIN_KERNEL_US and 0 < cm.share[i] <= 1


def test_share_grows_with_parallelism_and_saturates():
    g = protos.GraphDef()
    node(g, "small", "Placeholder", shape=[1])
    node(g, "big", "Placeholder", shape=[50_000_000])
    node(g, "a", "Relu", ["small"])
    node(g, "b", "Relu", ["big"])
    view, _ = model_of(g)
    cm = CostModel(view, None, target="v100")
    assert cm.share[task(cm, "a")] == pytest.approx(1 / 80)
    assert cm.share[task(cm, "b")] == 1.0
    # b streams 400 MB in and out at 80% of 900 GB/s.
    assert cm.duration[task(cm, "b")] == pytest.approx(2 * 200e6 / (900e3 * 0.8))


def test_targets_differ_as_their_data_sheets_do():
    assert set(TARGETS) == {"h100", "a100", "v100", "t4"}
    v100 = TARGETS["v100"]
    assert (v100.sms, v100.fp32_tflops, v100.memory_gbs) == (80, 15.7, 900.0)
    g = protos.GraphDef()
    node(g, "a", "Placeholder", shape=[4096, 4096])
    filter_const(g, "w", [4096, 4096])
    node(g, "mm", "MatMul", ["a", "w"])
    view, _ = model_of(g)
    times = {name: CostModel(view, None, target=name).time_us("mm") for name in TARGETS}
    assert times["h100"] < times["a100"] < times["v100"] < times["t4"]
    assert times["v100"] == pytest.approx(2 * 4096**3 / (15.7e6 * 0.7))


def test_unknown_target_and_bad_batch_are_input_errors():
    view = GraphView(call_graph())
    with pytest.raises(InputError, match="unknown target"):
        CostModel(view, None, target="k80")
    with pytest.raises(InputError, match="batch"):
        CostModel(view, None, batch_size=0)


def test_measured_costs_replace_the_model(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"unit": "ms", "ops": {"f:relu": 0.25, "not_in_model": 1}}))
    assert load_costs(path) == {"f:relu": 250.0, "not_in_model": 1000.0}
    view = GraphView(call_graph())
    cm = CostModel(view, None, target="v100", costs=str(path))
    assert cm.time_us("f:relu") == pytest.approx(250.0)
    assert cm.measured == 1


@pytest.mark.parametrize(
    "text, words",
    [
        ("not json", "not JSON"),
        ('{"unit": "us"}', "ops"),
        ('{"unit": "fortnights", "ops": {}}', "unknown unit"),
        ('{"unit": "us", "ops": {"a": -1}}', "non-negative"),
        ('{"unit": "us", "ops": {"a": "fast"}}', "non-negative"),
    ],
)
def test_bad_costs_files(tmp_path, text, words):
    path = tmp_path / "costs.json"
    path.write_text(text)
    with pytest.raises(InputError, match=words):
        load_costs(path)


def test_bad_costs_file_on_the_command_line(msopt, tmp_path):
    path = tmp_path / "costs.json"
    path.write_text('{"ops": {"a": -3}}')
    result = msopt("simulate", SAMPLES / "linreg_tf1", "--policy", "none", "--costs", path)
    assert result.returncode == 2 and result.stderr.startswith("msopt: error:") and "non-negative" in result.stderr


def test_measured_costs_from_the_command_line(msopt, tmp_path):
    model = load(SAMPLES / "linreg_tf1")
    cm = CostModel(GraphView(model.graph_def), model, target="v100")
    kernels = [cm.tasks.key[i] for i in range(len(cm)) if cm.kernel[i]]
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"unit": "us", "ops": {k: 1000 for k in kernels}}))
    result = msopt(
        "simulate",
        SAMPLES / "linreg_tf1",
        "--streams",
        2,
        "--policy",
        "none",
        "--target",
        "v100",
        "--costs",
        path,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ops_measured"] == len(kernels)
    assert doc["single_stream_ms"] >= len(kernels) * 1.0


def test_building_the_cost_model_leaves_the_protos_untouched():
    for name in ("towers_tf2", "stage_tf1", "deepfm_tf2", "linreg_frozen.pb"):
        model = load(SAMPLES / name)
        before = model.meta_graph.SerializeToString(deterministic=True)
        CostModel(GraphView(model.graph_def), model, target="t4", batch_size=3)
        assert model.meta_graph.SerializeToString(deterministic=True) == before, name


def test_v1_while_loop_back_edges_do_not_make_a_cycle(sample_cost):
    model, view, cm = sample_cost("stage_tf1", target="v100")
    for i in range(len(cm)):  # every edge goes forward in the task order
        assert all(src < i for src, _ in cm.tasks.inputs[i]) and all(src < i for src in cm.tasks.control[i])
    assert any(op == "NextIteration" for op in cm.tasks.op)


def test_frozen_graph_without_signatures_runs_every_node(sample_cost):
    model, view, cm = sample_cost("linreg_frozen.pb", target="v100")
    assert cm.signature is None and len(cm) == sum(1 for _ in view.real_nodes())
