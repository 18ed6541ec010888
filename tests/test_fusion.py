"""The fusion constraint, pattern by pattern: each group TensorFlow fuses (or sums on one device) stays on one stream.

For every pattern of msopt.planning.fusion a tiny graph is built with TensorFlow and run on two logical
CPU devices three ways: unpartitioned, with a plan that moves only the pattern's root to
device 1 ("split"), and with the plan the constraints make of it ("constrained"). The executed
partition graphs (RunMetadata) show what TensorFlow fused and where it ran. Split, a pattern is
either fused anyway on a device the plan did not say, or run unfused (other rounding);
constrained, the fused kernel runs on device 1 and the outputs are bitwise the unpartitioned ones.
Patterns this CPU build does not fuse (GPU-only ones, or conditions of TensorFlow's own) are
checked at the proto level only: the constraint groups them.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from msopt import emit
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.planning.constraints import apply
from msopt.planning.fusion import GROUPS, PATTERNS, fusion_groups

pytestmark = pytest.mark.tf

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1
RNG = np.random.default_rng(0)


def const(shape, name, scale=0.5):
    return tf.constant(RNG.standard_normal(shape).astype(np.float32) * scale, name=name)


def conv(x, cin=3, cout=4, name="conv"):
    return tf.nn.conv2d(x, const([3, 3, cin, cout], name + "_w"), 1, "SAME", name=name)


def bias(y, n, name="bias"):
    return tf.nn.bias_add(y, const([n], name + "_b"), name=name)


def image(shape=(2, 6, 6, 3)):
    return v1.placeholder(tf.float32, shape, name="x")


def matrix(name="x"):
    return v1.placeholder(tf.float32, [4, 8], name=name)


def batch_norm(y, n, name="bn"):
    return tf.raw_ops.FusedBatchNormV3(
        x=y,
        scale=const([n], name + "_s"),
        offset=const([n], name + "_o"),
        mean=const([n], name + "_m"),
        variance=tf.abs(const([n], name + "_v")) + 1,
        is_training=False,
        name=name,
    )[0]


def common_norm(x, axes, name="norm"):
    """tf.nn.moments + tf.nn.batch_normalization, written out (remapper's IsCommonNormPattern)."""
    mean = tf.reduce_mean(x, axes, keepdims=True, name=name + "_mean1")
    var = tf.reduce_mean(
        tf.math.squared_difference(x, mean, name=name + "_sqd"), axes, keepdims=True, name=name + "_mean0"
    )
    mul1 = tf.multiply(
        tf.math.rsqrt(tf.add(var, 1e-3, name=name + "_add"), name=name + "_rsqrt"),
        const([x.shape[-1]], name + "_gamma"),
        name=name + "_mul1",
    )
    return tf.add(
        tf.multiply(x, mul1, name=name + "_mul0"),
        tf.subtract(
            const([x.shape[-1]], name + "_beta"), tf.multiply(mul1, mean, name=name + "_mul2"), name=name + "_sub"
        ),
        name=name + "_out",
    )


def gelu_exact():
    y = bias(tf.matmul(matrix(), const([8, 5], "mm_w"), name="mm"), 5)
    erf = tf.add(tf.math.erf(tf.multiply(y, 0.70710677, name="mul_sqrt"), name="erf"), 1.0, name="erf_plus_one")
    return tf.multiply(tf.multiply(erf, 0.5, name="half"), y, name="gelu")


def hard_swish():
    y = bias(conv(image()), 4)
    relu6 = tf.nn.relu6(tf.add(y, 3.0, name="add3"), name="relu6")
    return tf.multiply(tf.multiply(relu6, 1.0 / 6, name="sixth"), y, name="hswish")


def batch_matmul():
    m = tf.raw_ops.BatchMatMulV2(
        x=v1.placeholder(tf.float32, [2, 3, 4, 5], name="x"), y=const([2, 3, 5, 4], "bmm_w"), name="bmm"
    )
    return tf.add(tf.multiply(m, const([], "scale"), name="mul"), const([2, 1, 4, 4], "addend"), name="add")


def pad_conv3d():
    p = tf.pad(
        v1.placeholder(tf.float32, [1, 4, 4, 4, 2], name="x"), [[0, 0], [1, 1], [1, 1], [1, 1], [0, 0]], name="pad"
    )
    return tf.nn.conv3d(p, const([3, 3, 3, 2, 3], "conv_w"), [1] * 5, "VALID", name="conv")


def squeeze_bias():
    y = tf.nn.conv2d(image((2, 1, 6, 3)), const([1, 3, 3, 4], "conv_w"), 1, "SAME", name="conv")
    return bias(tf.squeeze(y, [1], name="squeeze"), 4)


def mish():
    x = tf.abs(matrix(), name="f")  # not a Tanh: remapper matches the two inputs of the Mul by op type
    return tf.multiply(tf.tanh(tf.nn.softplus(x, name="softplus"), name="tanh"), x, name="mish")


def leaky_relu():
    x = tf.tanh(matrix(), name="f")
    return tf.maximum(tf.multiply(x, 0.2, name="mul"), x, name="max")


def known(name="x"):
    """A fed input with a static shape grappler trusts: a v1 Session does not trust fed shapes
    (a TF2 function's arguments it does), and the arithmetic optimizer needs them."""
    return tf.reshape(matrix(name), [4, 8], name=name + "_known")


def add_tree():
    """(f(x) + bias) + residual: the Add tree AddOpsRewrite turns into AddN(f(x), residual) + bias."""
    return tf.add(tf.add(tf.tanh(known(), name="f"), const([8], "b"), name="add_bias"), known("y"), name="add_res")


def associative_tree():
    """coeff * pow(x, 3), as tf.nn.gelu(approximate=True) writes it: ConvertPow, then MinimizeBroadcasts."""
    return tf.multiply(const([], "coeff"), tf.pow(tf.tanh(known(), name="f"), 3.0, name="pow"), name="mul")


# pattern name -> (graph builder, root node moved by the split plan, op TensorFlow runs the fused group as)
# (MinimizeBroadcasts makes no new op: it regroups Mul(coeff, Mul(x, x^2)) into Mul(Mul(coeff, x^2), x))
EXECUTED = {
    "contraction+bias": (
        lambda: bias(tf.matmul(matrix(), const([8, 5], "mm_w"), name="mm"), 5),
        "bias",
        "_MklNativeFusedMatMul",
    ),
    "contraction+bias+activation": (
        lambda: tf.nn.relu(bias(conv(image()), 4), name="act"),
        "act",
        "_MklNativeFusedConv2D",
    ),
    "conv+squeeze+bias": (squeeze_bias, "bias", "_MklNativeFusedConv2D"),
    "conv2d+batchnorm": (lambda: batch_norm(conv(image()), 4), "bn", "_MklNativeFusedConv2D"),
    "conv2d+batchnorm+activation": (
        lambda: tf.nn.relu(batch_norm(conv(image()), 4), name="act"),
        "act",
        "_MklNativeFusedConv2D",
    ),
    "batchnorm+sideinput+relu": (
        lambda: tf.nn.relu(batch_norm(image(), 3), name="act"),
        "act",
        "_MklNativeFusedBatchNormEx",
    ),
    "pad+conv3d": (pad_conv3d, "conv", "_MklNativeFusedConv3D"),
    "matmul+bias+gelu": (gelu_exact, "gelu", "_MklNativeFusedMatMul"),
    "conv+bias+hardswish": (hard_swish, "hswish", "_MklNativeFusedConv2D"),
    "mish": (mish, "mish", "_MklFusedMish"),
    "batchmatmul+mul+add": (batch_matmul, "add", "_MklFusedBatchMatMulV2"),
    "mul+maximum (leakyrelu)": (leaky_relu, "max", "LeakyRelu"),
    "conv2d+bias/batchnorm+swish": (
        lambda: (lambda y: tf.multiply(tf.sigmoid(y, name="sigmoid"), y, name="swish"))(bias(conv(image()), 4)),
        "swish",
        "_MklNativeFusedConv2D",
    ),
    "sigmoid+mul (swish)": (
        lambda: (lambda x: tf.multiply(tf.sigmoid(x, name="sigmoid"), x, name="swish"))(tf.tanh(matrix(), name="f")),
        "swish",
        "_MklSwish",
    ),
    "layer norm": (
        lambda: common_norm(tf.tanh(v1.placeholder(tf.float32, [2, 5, 8], name="x"), name="f"), [2]),
        "norm_out",
        "_MklLayerNorm",
    ),
    "instance norm": (lambda: common_norm(tf.tanh(image(), name="f"), [1, 2]), "norm_out", "_MklFusedInstanceNorm"),
    "instance norm+activation": (
        lambda: tf.nn.relu(common_norm(tf.tanh(image(), name="f"), [1, 2]), name="act"),
        "act",
        "_MklFusedInstanceNorm",
    ),
    "pad+conv2d (layout pass)": (
        lambda: tf.nn.conv2d(
            tf.pad(image(), [[0, 0], [1, 1], [1, 1], [0, 0]], name="pad"),
            const([3, 3, 3, 4], "conv_w"),
            1,
            "VALID",
            name="conv",
        ),
        "conv",
        "_MklNativePadWithConv2D",
    ),
    "add tree": (add_tree, "add_res", "AddN"),
    "associative tree": (associative_tree, "mul", "Mul(coeff, x^2)"),
}


def fused_nodes(pattern, members, executed, reference=None):
    """[(name, device)] of the executed nodes that show the whole pattern fused (or regrouped):
    nodes of the fused op named as in ``reference`` (the unpartitioned run), with members gone."""
    if pattern == "associative tree":
        return [("pow", executed["pow"][1])] if "coeff" in executed.get("pow", ["", 0, []])[2] else []
    if pattern == "add tree":  # new nodes named for the rewrite
        return [
            (name, device) for name, (op, device, _) in executed.items() if "AddOpsRewrite" in name and op == "AddN"
        ]
    fused_op = EXECUTED[pattern][2]
    names = {name for name, (op, *_) in (reference or executed).items() if op == fused_op and name in members}
    if all(name in executed for name in members):
        return []  # every member ran as itself: nothing was fused
    return [(name, executed[name][1]) for name in sorted(names) if executed.get(name, [""])[0] == fused_op]


def grad_graph():
    """Conv2DBackpropFilter and BiasAddGrad reading one gradient (a training graph)."""
    x = image()
    y = bias(conv(x), 4)
    return tf.gradients(
        tf.reduce_sum(y * y),
        [v1.get_default_graph().get_tensor_by_name("conv_w:0"), v1.get_default_graph().get_tensor_by_name("bias_b:0")],
    )[0]


def gru_cell(attention):
    """The GRU (AUGRU) cell remapper's GRUCellPatternMatcher matches, written with tf ops."""
    x, h = matrix(), matrix("h")
    ru = tf.sigmoid(
        bias(tf.matmul(tf.concat([x, h], 1, name="concat"), const([16, 16], "ru_w"), name="ru_mm"), 16, "ru_bias"),
        name="ru_gates",
    )
    r, u = tf.split(ru, 2, axis=1, name="ru_split")
    c = tf.tanh(
        bias(tf.matmul(tf.concat([x, r * h], 1, name="concat1"), const([16, 8], "c_w"), name="c_mm"), 8, "c_bias"),
        name="c_gate",
    )
    if attention:
        u = tf.multiply(tf.subtract(1.0, v1.placeholder(tf.float32, [4, 1], name="attention")), u, name="au_atten")
    return tf.add(
        tf.multiply(u, h, name="ns_mul2"),
        tf.multiply(tf.subtract(1.0, u, name="ns_sub1"), c, name="ns_mul1"),
        name="output",
    )


# Patterns this CPU build does not fuse on these graphs, or only on a GPU: grouped, not run.
PROTO_ONLY = {
    "relugrad+batchnormgrad": (
        lambda: tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=tf.raw_ops.ReluGrad(gradients=image(), features=const([2, 6, 6, 3], "features")),
            x=const([2, 6, 6, 3], "bn_x"),
            scale=const([3], "s"),
            reserve_space_1=const([3], "r1"),
            reserve_space_2=const([3], "r2"),
            reserve_space_3=const([3], "r3"),
            is_training=True,
            name="bn_grad",
        )[0],
        "bn_grad",
        "GPU only (cuDNN, half precision, training)",
    ),
    "asstring+hashbucket": (
        lambda: tf.strings.to_hash_bucket_fast(
            tf.strings.as_string(v1.placeholder(tf.int64, [4], name="x"), name="as_string"), 10, name="bucket"
        ),
        "bucket",
        "string ops: host-only, they keep their device and get no stream",
    ),
    "comparison+cast": (
        lambda: tf.cast(tf.less(matrix(), const([4, 8], "y"), name="less"), tf.float32, name="cast"),
        "cast",
        "not fused by this build (its _*WithCast kernels are absent)",
    ),
    "contraction+bias+add+activation": (
        lambda: tf.nn.relu(tf.add(bias(conv(image()), 4), const([2, 6, 6, 4], "side"), name="add"), name="act"),
        "act",
        "not fused on these graphs by this build",
    ),
    "contraction+bias+add": (
        lambda: tf.add(bias(conv(image()), 4), const([2, 6, 6, 4], "side"), name="add"),
        "add",
        "not fused on these graphs by this build",
    ),
    "conv+leakyrelu/mish": (
        lambda: tf.nn.leaky_relu(conv(image()), 0.2, name="act"),
        "act",
        "matched on _FusedConv2D, a remapper product",
    ),
    "gru cell": (lambda: gru_cell(False), "output", "GRUBlockCell: training-time cell of oneDNN builds"),
    "transpose+conv+transpose (layout pass)": (
        lambda: tf.transpose(
            conv(tf.transpose(image((2, 3, 6, 6)), [0, 2, 3, 1], name="to_nhwc")), [0, 3, 1, 2], name="to_nchw"
        ),
        "to_nchw",
        "not fused by this build's layout pass",
    ),
    "conv2d filter grad+bias grad (layout pass)": (grad_graph, None, "training graphs (backward ops)"),
    "dilated conv": (
        lambda: tf.nn.atrous_conv2d(image(), const([3, 3, 3, 4], "conv_w"), 2, "SAME", name="atrous"),
        "atrous/BatchToSpaceND",
        "not fused by this build (SpaceToBatchND and BatchToSpaceND still run)",
    ),
    "conv2d+bias (layout pass)": (
        lambda: bias(conv(image()), 4),
        "bias",
        "the remapper fuses Conv2D+BiasAdd first (contraction+bias)",
    ),
}


def build(builder):
    graph = tf.Graph()
    with graph.as_default():
        tf.identity(builder(), name="output_identity")
    return graph.as_graph_def()


def groups_of(view, pattern):
    return [set(members) for name, members in fusion_groups(view) if name == pattern]


def test_every_pattern_of_the_table_is_tested():
    tested = set(EXECUTED) | set(PROTO_ONLY)
    assert {p.name for p in PATTERNS} | {g.name for g in GROUPS} <= tested
    assert all(p.source.split()[0] in ("remapper.cc", "mkl_layout_pass.cc") for p in PATTERNS)
    assert all(g.source.startswith("arithmetic_optimizer.cc") for g in GROUPS)


# -- run on two logical CPU devices ---------------------------------------------------------------
PROBE = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")  # oneDNN fuses on any x86 CPU (by default only on some)
import numpy as np, tensorflow as tf
v1 = tf.compat.v1
result = {}
for path in sys.argv[1:]:
    graph_def = v1.GraphDef.FromString(open(path, "rb").read())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    session = v1.Session(graph=graph, config=v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False))
    rng = np.random.default_rng(1)
    feeds = {graph.get_tensor_by_name(n.name + ":0"): rng.standard_normal(
        graph.get_tensor_by_name(n.name + ":0").shape.as_list()).astype(np.float32)
        for n in graph_def.node if n.op == "Placeholder"}
    metadata = v1.RunMetadata()
    out = session.run(graph.get_tensor_by_name("output_identity:0"), feeds,
                      options=v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    executed = {n.name: [n.op, int(n.device.rpartition(":")[2]), [i.split(":")[0] for i in n.input]]
                for g in metadata.partition_graphs for n in g.node}
    result[path] = {"executed": executed, "output": np.asarray(out).tobytes().hex()}
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{pattern: {"members", "split", "constrained", "original": executed graph + output}}."""
    tmp = tmp_path_factory.mktemp("fusion")
    cases, paths = {}, []
    for name, (builder, root, _) in EXECUTED.items():
        folder = tmp / name.replace(" ", "_").replace("/", "_").replace("+", "_").replace("(", "").replace(")", "")
        folder.mkdir()
        original = folder / "original.pb"
        original.write_bytes(build(builder).SerializeToString())
        model = load(original)
        view = GraphView(model.graph_def)
        split = {root: 1}
        constrained, merges = apply(view, split, 2)
        members = set().union(*[g for g in groups_of(view, name) if root in g])
        cases[name] = {"members": members, "plan": constrained, "merges": merges}
        for label, plan in (("split", split), ("constrained", constrained)):
            emit.write(model, plan, folder / f"{label}.pb", "device", "cpu")
        paths += [folder / f"{label}.pb" for label in ("original", "split", "constrained")]
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, paths)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for name, case in cases.items():
        for label, path in zip(("original", "split", "constrained"), paths[3 * list(cases).index(name) :][:3]):
            case[label] = result[str(path)]
    return cases


@pytest.mark.parametrize("pattern", sorted(EXECUTED))
def test_pattern_constrained_runs_fused_on_the_planned_device(runs, pattern):
    _, root, fused_op = EXECUTED[pattern]
    case = runs[pattern]
    assert root in case["members"] and len(case["members"]) > 1, "msopt.planning.fusion does not find the pattern"
    assert all(case["plan"][key] == 1 for key in case["members"]), "the constraint leaves the group split"
    assert any(m["constraint"] == "fusion" for m in case["merges"])
    original, constrained = case["original"]["executed"], case["constrained"]["executed"]
    assert fused_nodes(pattern, case["members"], original), f"TensorFlow does not run {fused_op} here"
    fused = fused_nodes(pattern, case["members"], constrained, original)
    assert fused and all(device == 1 for _, device in fused), f"{fused_op} not on the planned device: {fused}"
    ran = {name: device for name, (_, device, _) in constrained.items() if name in case["members"]}
    assert set(ran.values()) <= {1}
    assert case["constrained"]["output"] == case["original"]["output"]  # bitwise


@pytest.mark.parametrize("pattern", sorted(EXECUTED))
def test_pattern_split_is_not_run_as_planned(runs, pattern):
    """Split, TensorFlow either fuses the group anyway, not where the plan said, or runs it unfused."""
    root = EXECUTED[pattern][1]
    case = runs[pattern]
    split = case["split"]["executed"]
    fused = fused_nodes(pattern, case["members"], split, case["original"]["executed"])
    planned = {name: (1 if name == root else 0) for name in case["members"]}
    if fused:  # fused anyway: one node, one device, for members the plan put on two
        ran = {name: split[name][1] if name in split else fused[0][1] for name in planned}
        assert {name: d for name, d in ran.items() if d != planned[name]}
    else:  # not fused (as a whole): the root ran as written, where planned
        assert split[root][1] == 1 and not split[root][0].startswith("_MklFused")


def test_split_add_tree_changes_the_sum_order_and_the_bits(runs):
    """The transformer's difference, in small: AddOpsRewrite regroups the Adds only on one device."""
    original = runs["add tree"]["original"]["executed"]
    split = runs["add tree"]["split"]["executed"]
    assert any("AddOpsRewrite" in name for name in original)
    assert not any("AddOpsRewrite" in name for name in split)
    assert runs["add tree"]["split"]["output"] != runs["add tree"]["original"]["output"]
    assert runs["add tree"]["constrained"]["output"] == runs["add tree"]["original"]["output"]


# -- grouped at the proto level ---------------------------------------------------------------------
@pytest.mark.parametrize("pattern", sorted(k for k, v in PROTO_ONLY.items() if v[0] is not None))
def test_pattern_is_grouped_at_the_proto_level(pattern):
    builder, root, why = PROTO_ONLY[pattern]
    view = GraphView(build(builder))
    found = groups_of(view, pattern)
    assert found, f"msopt.planning.fusion does not find {pattern} ({why})"
    group = next(g for g in found if root is None or root in g)
    plan, _ = apply(view, {sorted(group)[-1]: 1}, 2)
    streams = {plan.get(key) for key in group}
    if pattern == "asstring+hashbucket":
        assert streams == {None}  # host-only: no stream for either
    else:
        assert streams == {1}


def _every_order(count, tested):
    """What msopt.planning.fusion._match first tried: every order of the inputs (the tested children's inputs in each)."""
    from itertools import permutations

    return [tuple(order[i] for i in tested) for order in permutations(range(count))]


def test_matching_each_distinct_assignment_once_equals_trying_every_order():
    """_match tries each distinct way to give the tested children their inputs once (ANY children take any input):
    the same answer as trying every order, at every node for every pattern tree, on every pattern's graph and on
    the sample models."""
    from conftest import SAMPLES

    from msopt.planning.fusion import _match

    graphs = [build(b) for b, *_ in list(EXECUTED.values()) + list(PROTO_ONLY.values()) if b is not None]
    graphs += [load(str(SAMPLES / name)).graph_def for name in ("deepfm_tf2", "towers_tf1", "stage_tf2")]
    trees = [tree for pattern in PATTERNS for tree in pattern.trees]
    matched = 0
    for graph in graphs:
        view = GraphView(graph)
        for key in view.nodes:
            for tree in trees:
                found = _match(view, key, tree)
                assert found == _match(view, key, tree, _every_order), (key, sorted(tree.ops))
                matched += found is not None
    assert matched >= len(graphs) - 3  # every pattern's graph has its match


def test_gru_and_augru_cells_are_grouped_whole():
    for attention in (False, True):
        view = GraphView(build(lambda: gru_cell(attention)))  # noqa: B023 (called at once)
        group = max(groups_of(view, "gru cell"), key=len)
        assert {
            "output",
            "ns_mul1",
            "ns_mul2",
            "ns_sub1",
            "c_gate",
            "c_bias",
            "c_mm",
            "concat1",
            "ru_split",
            "ru_gates",
            "ru_bias",
            "ru_mm",
            "concat",
        } <= group
        assert ("au_atten" in group) == attention


def test_no_group_spans_unrelated_nodes():
    """A chain MatMul -> BiasAdd -> Relu that feeds two consumers is not fused past its fork."""

    def forked():
        y = tf.nn.relu(bias(tf.matmul(matrix(), const([8, 5], "mm_w"), name="mm"), 5), name="act")
        return tf.add(tf.tanh(y, name="t1"), tf.sigmoid(y, name="s1"), name="join")

    view = GraphView(build(forked))
    grouped = set().union(*[set(m) for n, m in fusion_groups(view) if n != "add tree" and n != "associative tree"])
    assert {"mm", "bias", "act"} <= grouped
    assert not {"t1", "s1"} & grouped


# -- the transformer encoder that differed, and MobileNetV2 -----------------------------------------
@pytest.mark.slow
def test_transformer_groups_include_the_trees_that_differed(transformer):
    """The two rewrites split plans lost: (einsum + bias) + residual summed by AddOpsRewrite, and
    GELU's coeff * pow(x, 3) regrouped by MinimizeBroadcasts."""
    view = GraphView(load(transformer).graph_def)
    groups = [(name, {key.split(":", 1)[1] for key in members}) for name, members in fusion_groups(view)]
    assert any(
        name == "add tree" and {"model/tf.__operators__.add_3/AddV2", "model/transformer/layer_0/output/add"} <= m
        for name, m in groups
    )
    assert any(
        name == "associative tree"
        and {"model/transformer/layer_1/gelu/Gelu/mul_1", "model/transformer/layer_1/gelu/Gelu/Pow"} <= m
        for name, m in groups
    )


@pytest.mark.parametrize("policy,streams", [("chains", 2), ("chains", 4), ("auto", 4)])
@pytest.mark.slow
def test_transformer_partition_verifies_bitwise(msopt, transformer, tmp_path, policy, streams):
    done = msopt(
        "partition",
        transformer,
        "--policy",
        policy,
        "--streams",
        streams,
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
    doc = json.loads(done.stdout)
    assert doc["verify"]["ok"] and doc["verify"]["max_abs_diff"] == 0
    assert all(s["identical"] for s in doc["verify"]["signatures"].values())
    if policy == "chains":
        assert sum(1 for n in doc["nodes_per_stream"] if n) > 1  # a real multi-stream plan was verified
        assert any(m["constraint"] == "fusion" for m in doc["constraint_merges"])


@pytest.mark.slow
def test_mobilenet_chains_still_verifies(msopt, mobilenet_v2, tmp_path):
    done = msopt(
        "partition",
        mobilenet_v2,
        "--policy",
        "chains",
        "--streams",
        2,
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
    assert json.loads(done.stdout)["verify"]["ok"]


# -- --verify names what differs; --tolerance accepts a difference explicitly ----------------------
VERIFY = r"""
import json, sys
from msopt.load import load
from msopt.runner.verify import verify
tolerance = None if sys.argv[3] == "none" else float(sys.argv[3])
print(json.dumps(verify(load(sys.argv[1]), load(sys.argv[2]), 2, tolerance=tolerance)))
"""


@pytest.fixture(scope="module")
def split_add_tree(tmp_path_factory):
    """A model and a rewrite of it that splits an Add tree across devices (no constraints): not bitwise equal."""
    tmp = tmp_path_factory.mktemp("tolerance")

    def residual():
        def x(name):
            return tf.reshape(v1.placeholder(tf.float32, [64, 64], name=name), [64, 64], name=name + "_known")

        return tf.add(tf.add(tf.tanh(x("x"), name="f"), const([64], "b"), name="add_bias"), x("y"), name="add_res")

    original = tmp / "original.pb"
    original.write_bytes(build(residual).SerializeToString())
    emit.write(load(original), {"add_res": 1}, tmp / "split.pb", "device", "cpu")
    return original, tmp / "split.pb"


def run_verify(original, rewritten, tolerance):
    done = subprocess.run(
        [sys.executable, "-c", VERIFY, str(original), str(rewritten), str(tolerance)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_verify_names_the_rewrite_made_in_one_model_only(split_add_tree):
    report = run_verify(*split_add_tree, "none")
    assert not report["ok"] and not report["identical"] and 0 < report["max_abs_diff"] < 1e-5
    assert "tolerance" not in report
    rows = report["differences"]
    assert any(r["node"] and "AddOpsRewrite" in r["node"] and "arithmetic optimizer" in r["why"] for r in rows)
    assert any(r["node"] == "add_res" and r["rewritten"] == "AddV2(add_bias, y_known)" for r in rows)


def test_tolerance_accepts_the_difference_and_says_so(split_add_tree):
    report = run_verify(*split_add_tree, 1e-5)
    assert report["ok"] and not report["identical"] and report["tolerance"] == 1e-5
    assert report["differences"]  # never silent: what differs is still reported
    from msopt.commands.partition import format_text as _partition_text

    doc = {
        "output": "out",
        "policy": "manual",
        "streams": 2,
        "elapsed_s": 0,
        "nodes_per_stream": [1, 1],
        "cross_stream_edges": 1,
        "functions": {},
        "constraint_merges": [],
        "const_copies": {},
        "simulated": {
            "target": "h100",
            "makespan_ms": 1,
            "single_stream_ms": 1,
            "speedup": 1,
            "ratio_to_bound": 1,
            "speedup_range": [1, 1],
            "robust": True,
        },
        "verify": report,
    }
    text = _partition_text(doc)
    assert "NOT bitwise equal, accepted by --tolerance 1e-05" in text and "arithmetic optimizer" in text
    assert not run_verify(*split_add_tree, 1e-12)["ok"]  # a tolerance below the difference still fails


def test_tolerance_option(msopt, tmp_path):
    from conftest import SAMPLES

    common = ("partition", SAMPLES / "towers_tf1", "-n", "2", "--placement", "device", "--device-type", "cpu")
    done = msopt(*common, "-o", tmp_path / "a", "--tolerance", "1e-6")
    assert done.returncode == 2 and done.stderr.strip() == "msopt: error: --tolerance is read by --verify"
    assert not (tmp_path / "a").exists()
    done = msopt(*common, "-o", tmp_path / "b", "--verify", "--tolerance", "1e-6", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["verify"]
    assert result["ok"] and result["identical"] and result["tolerance"] == 1e-6 and "differences" not in result
    done = msopt(*common, "-o", tmp_path / "c", "--verify", "--tolerance", "-1")
    assert done.returncode == 2
