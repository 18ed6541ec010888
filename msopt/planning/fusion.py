"""Which node groups TensorFlow rewrites into one kernel (or regroups), so that they must share one device.

Three rewriters do this on a model's graph, each read from TensorFlow's source:

- grappler's remapper (``tensorflow/core/grappler/optimizers/remapper.cc``): op-type patterns
  fused into one node (``_FusedConv2D``, ``_FusedMatMul``, ``_MklLayerNorm``, ...). It runs
  before the graph is split by device and does not look at the other nodes' devices: a plan
  that splits a pattern is silently not honoured (the fused node runs where the root was).
- oneDNN's layout pass (``tensorflow/core/common_runtime/mkl_layout_pass.cc``): node merges
  made after the graph is split by device, so only inside one device's partition.
- grappler's arithmetic optimizer (``arithmetic_optimizer.cc``): AddOpsRewrite and
  MinimizeBroadcasts regroup a tree of Add/AddN (or of one binary associative op) only while
  every member sits on the root's device. Split, the tree is summed in another order: other
  rounding. This is what made a transformer encoder's rewrite differ bitwise.

``PATTERNS`` lists the remapper and layout-pass patterns as op-type trees, each named for the
function of TensorFlow it comes from; ``GROUPS`` the arithmetic-optimizer regroupings.
``fusion_groups(view)`` yields the node groups of a graph view that match any of them.
Matching is by op type only (like remapper's SubGraphMatcher); the value and shape checks
TensorFlow adds on top are left out, so a group found here may not be fused in the end:
keeping it on one stream is then harmless.
"""

import functools
from collections import defaultdict, namedtuple
from itertools import permutations

from msopt.graph.view import reach

PASS_THROUGH = frozenset(
    {"Identity", "StopGradient", "PreventGradient", "Snapshot"}
)  # removed before the remapper runs


ANY = None  # a pattern child matching any input


class P:
    """One node of an op-type pattern: its op types and, optionally, one pattern per data input.

    With children the node must have exactly that many data inputs, matched in any order; a
    child of ``ANY`` matches any input and is not part of the group.
    """

    __slots__ = ("ops", "children", "tested")

    def __init__(self, ops, *children):
        self.ops = frozenset(ops.split("|"))
        self.children = children
        self.tested = tuple(i for i, child in enumerate(children) if child is not ANY)


Pattern = namedtuple("Pattern", "name source where trees")
Group = namedtuple("Group", "name source ops same_op aliases")

CONTRACTION = "Conv2D|Conv3D|DepthwiseConv2dNative|MatMul"
ACTIVATION = "Relu|Relu6|Elu|LeakyRelu|Tanh|Sigmoid"  # IsSupportedActivation (Tanh, Sigmoid with oneDNN)
ADD = "Add|AddV2"
BATCH_NORM = "FusedBatchNorm|FusedBatchNormV2|FusedBatchNormV3"
COMPARISON = "Equal|NotEqual|Greater|GreaterEqual|Less|LessEqual"


def _bias(contraction=CONTRACTION):
    return P("BiasAdd", P(contraction, ANY, ANY), ANY)


def _batch_norm(head):
    return P(BATCH_NORM, head, ANY, ANY, ANY, ANY)


def _common_norm():
    """IsCommonNormPattern: AddV2(Mul(x, Mul(Rsqrt(Add(Mean(SquaredDiff(x, Mean(x))), eps)), gamma)),
    Sub(beta, Mul(mul1, mean1))) -- the ops tf.nn.batch_normalization(tf.nn.moments(...)) leaves."""
    mean1 = P("Mean", ANY, ANY)
    mul1 = P("Mul", P("Rsqrt", P(ADD, P("Mean", P("SquaredDifference", ANY, mean1), ANY), ANY)), ANY)
    return P(ADD, P("Mul", ANY, mul1), P("Sub", ANY, P("Mul", mul1, mean1)))


def _gru(attention):
    """GRUCellPatternMatcher (GRU and AUGRU cells): gates MatMul+BiasAdd+Sigmoid / Tanh, Split, Mul, Sub."""
    ru_gates = P("Sigmoid", P("BiasAdd", P("MatMul", P("ConcatV2", ANY, ANY, ANY), ANY), ANY))
    split = P("Split", ANY, ru_gates)
    concat1 = P("ConcatV2", ANY, P("Mul", split, ANY), ANY)
    c_gate = P("Tanh", P("BiasAdd", P("MatMul", concat1, ANY), ANY))
    gate = P("Mul", split, P("Sub", ANY, ANY)) if attention else split
    return P("AddV2", P("Mul", gate, ANY), P("Mul", P("Sub", ANY, gate), c_gate))


def _gelu():
    """FindMatMulBiasAddAndGelu: the standalone Gelu op, GeluExact (two forms, with Erf) and
    GeluApproximate (with Tanh; matched on the _FusedMatMul a first remapper pass made)."""
    bias = _bias("MatMul")
    erf = P(ADD, P("Erf", P("Mul", P("BiasAdd"), P("Cast|Const"))), P("Cast|Const"))
    exact = P("Mul", P("Mul", erf, P("Cast|Const")), bias)
    exact2 = P("Mul", erf, P("Mul", bias, P("Cast|Const")))
    approximate = []
    for head in (P("_FusedMatMul"), bias):  # the saved graph still has MatMul+BiasAdd and Pow(x, 3)
        for cube in (P("Mul", P("Mul", P("Const"), head), P("Square", head)), P("Mul", ANY, P("Pow", head, ANY))):
            tanh = P("Tanh", P("Mul", P("AddV2", head, cube), ANY))
            approximate.append(P("Mul", P("Mul", P("AddV2", tanh, ANY), ANY), head))
    return (P("Gelu", bias), exact, exact2, *approximate)


def _hard_swish(head=None):
    """FindHardSwish: x * (Relu6(x + 3) * 1/6), or (x * Relu6(x + 3)) * 1/6."""
    x = head or ANY
    relu6 = P("Relu6", P(ADD, P("Const"), x))
    return (P("Mul", P("Mul", relu6, P("Const")), x), P("Mul", P("Mul", relu6, x), P("Const")))


def _transpose_around(op):
    return P("Transpose", P(op, P("Transpose", ANY, ANY), *([ANY] if op != "MaxPool3D" else [])), ANY)


# fmt: off
PATTERNS = (
    # remapper, on every device (subject to its dtype/format checks)
    Pattern("contraction+bias", "remapper.cc FindContractionWithBias", "cpu,gpu", (_bias(),)),
    Pattern("contraction+bias+activation", "remapper.cc FindContractionWithBiasAndActivation", "cpu,gpu",
            (P(ACTIVATION, _bias()),)),
    Pattern("conv+squeeze+bias", "remapper.cc FindConvWithSqueezeAndBias", "cpu",
            (P("BiasAdd", P("Squeeze", P("Conv2D|Conv3D", ANY, ANY)), ANY),)),
    Pattern("conv2d+batchnorm", "remapper.cc FindConv2DWithBatchNorm", "cpu",
            (_batch_norm(P("Conv2D", ANY, ANY)),)),
    Pattern("conv2d+batchnorm+activation", "remapper.cc FindConv2DWithBatchNormAndActivation", "cpu",
            (P(ACTIVATION, _batch_norm(P("Conv2D", ANY, ANY))),)),
    Pattern("batchnorm+sideinput+relu", "remapper.cc FindFusedBatchNormEx", "gpu; cpu with oneDNN",
            (P("Relu", _batch_norm(ANY)), P("Relu", P(ADD, _batch_norm(ANY), ANY))),),
    Pattern("relugrad+batchnormgrad", "remapper.cc FindFusedBatchNormGradEx", "gpu",
            (P("FusedBatchNormGrad|FusedBatchNormGradV2|FusedBatchNormGradV3", P("ReluGrad", ANY, ANY),
               ANY, ANY, ANY, ANY, ANY),)),
    Pattern("asstring+hashbucket", "remapper.cc FindTensorToHashBucket", "cpu,gpu",
            (P("StringToHashBucketFast", P("AsString", ANY)),)),
    Pattern("comparison+cast", "remapper.cc FindComparisonWithCast", "cpu",
            (P("Cast", P(COMPARISON, ANY, ANY)),)),
    Pattern("dilated conv", "remapper.cc FindDilatedConv", "cpu",
            (P("BatchToSpaceND", P("Conv2D|DepthwiseConv2dNative", P("SpaceToBatchND", ANY, ANY, ANY), ANY), ANY, ANY),)),
    # remapper, oneDNN builds only (the default tensorflow-cpu wheel on x86 Linux)
    Pattern("gru cell", "remapper.cc CheckFuseGRUPatterns", "cpu with oneDNN", (_gru(False), _gru(True))),
    Pattern("contraction+bias+add+activation", "remapper.cc FindContractionWithBiasAndAddActivation",
            "cpu with oneDNN", (P(ACTIVATION, P(ADD + "|AddN", _bias(), ANY)),)),
    Pattern("conv+leakyrelu/mish", "remapper.cc FindContractionWithActivation", "cpu with oneDNN",
            (P("LeakyRelu|_MklFusedMish", P("Conv2D|_FusedConv2D")),)),
    Pattern("contraction+bias+add", "remapper.cc FindContractionWithBiasAddAndAdd", "cpu with oneDNN",
            (P(ADD + "|AddN", _bias(), ANY),)),
    Pattern("pad+conv3d", "remapper.cc FindPadWithConv3D", "cpu with oneDNN",
            (P("Conv3D|_FusedConv3D", P("Pad", ANY, ANY), ANY),)),
    Pattern("matmul+bias+gelu", "remapper.cc FindMatMulBiasAddAndGelu", "cpu with oneDNN", _gelu()),
    Pattern("conv+bias+hardswish", "remapper.cc FindContractionWithBiasAddAndHardSwish", "cpu with oneDNN",
            _hard_swish(_bias("Conv2D|DepthwiseConv2dNative"))),
    Pattern("mish", "remapper.cc FindSoftplusAndTanhAndMul", "cpu with oneDNN",
            (P("Mul", P("Tanh", P("Softplus", ANY)), ANY),)),
    Pattern("batchmatmul+mul+add", "remapper.cc FindFusedBatchMatMul", "cpu with oneDNN",
            (P("AddV2", P("Mul", P("BatchMatMulV2"), ANY), ANY),)),
    Pattern("mul+maximum (leakyrelu)", "remapper.cc FindMulAndMaximum", "cpu with oneDNN",
            (P("Maximum", P("Mul", ANY, P("Const|Cast")), ANY),)),
    Pattern("conv2d+bias/batchnorm+swish", "remapper.cc FindConv2DSwish", "cpu with oneDNN",
            tuple(P("Mul", P("Sigmoid", second), P(next(iter(second.ops))))
                  for second in (P("BiasAdd", P("Conv2D"), ANY),
                                 *(P(op, P("Conv2D"), ANY, ANY, ANY, ANY) for op in BATCH_NORM.split("|"))))),
    Pattern("sigmoid+mul (swish)", "remapper.cc FindSigmoidAndMul", "cpu with oneDNN",
            (P("Mul", P("Sigmoid", ANY), ANY),)),
    Pattern("layer norm", "remapper.cc FindMklLayerNorm", "cpu with oneDNN", (
        P("AddV2", ANY, P("Mul", P("Reshape", P("FusedBatchNormV3", P("Reshape", ANY, ANY), P("Fill", ANY, P("Const")),
                                                  P("Fill", ANY, P("Const")), P("Const"), P("Const")), ANY), ANY)),
        P("AddV2", ANY, P("Mul", P("Sub", ANY, P("Mean", ANY, ANY)),
                          P("Mul", P("Rsqrt", P("AddV2", P("Mean", P("Square", P("Sub")), ANY), P("Const"))), ANY))),
        _common_norm())),
    Pattern("instance norm+activation", "remapper.cc FindInstanceNormWithActivation", "cpu with oneDNN",
            (P("Relu|LeakyRelu", _common_norm()),)),
    Pattern("instance norm", "remapper.cc FindInstanceNorm", "cpu with oneDNN", (_common_norm(),)),
    # oneDNN layout pass: after the graph is split by device, inside one partition only
    Pattern("conv2d+bias (layout pass)", "mkl_layout_pass.cc MergeConv2DWithBiasAdd", "cpu with oneDNN",
            (P("BiasAdd", P("Conv2D", ANY, ANY), ANY),)),
    Pattern("pad+conv2d (layout pass)", "mkl_layout_pass.cc MergePadWithConv2D", "cpu with oneDNN",
            (P("Conv2D|_FusedConv2D", P("Pad", ANY, ANY), ANY),)),
    Pattern("conv2d filter grad+bias grad (layout pass)",
            "mkl_layout_pass.cc MergeConv2DBackpropFilterWithBiasAddGrad", "cpu with oneDNN", ()),
    Pattern("transpose+conv+transpose (layout pass)", "mkl_layout_pass.cc FuseTransposeMklOpTranspose",
            "cpu with oneDNN", tuple(_transpose_around(op) for op in ("Conv2D", "Conv3D", "MaxPool3D"))),
)

# ConvertPowStage runs first and turns Pow(x, 3) into Mul(x, Square(x)): a Mul of the tree.
GROUPS = (
    Group("add tree", "arithmetic_optimizer.cc AddOpsRewriteStage", frozenset({"Add", "AddV2", "AddN"}), False, {}),
    Group("associative tree", "arithmetic_optimizer.cc MinimizeBroadcastsStage (after ConvertPowStage)",
          frozenset({"Mul", "Add", "AddV2"}), True, {"Pow": "Mul"}),
)
# fmt: on
TREE_OPS = frozenset().union(*(group.ops | group.aliases.keys() for group in GROUPS))  # every op a tree may hold


def fusion_groups(view, nodes=None):
    """(pattern name, [node keys]) for every pattern and regrouping that matches in the view, or rooted at
    ``nodes`` (real nodes, whole function bodies: a group never leaves its body) if given."""
    nodes = list(view.real_nodes()) if nodes is None else nodes
    present = frozenset(node.op for node in nodes)
    rooted = {op: _patterns_rooted_at(op, present) for op in present}
    forests = _tree_inputs(view, nodes)
    consumers = _data_consumers(nodes) if "BiasAddGrad" in present else {}
    # Only these nodes can root a group: an op type some pattern is rooted at, or a tree node taking others in.
    matching = {op for op, found in rooted.items() if found} | ({"BiasAddGrad"} & present)
    roots = set().union(*(inputs.keys() for _, inputs in forests))
    for node in [node for node in nodes if node.op in matching or node.key in roots]:
        for name, trees in rooted[node.op]:
            for tree in trees:
                matched = _match(view, node.key, tree)
                if matched and len(matched) > 1:
                    yield name, sorted(matched)
                    break
        if node.op == "BiasAddGrad":  # merged with the Conv2DBackpropFilter reading the same gradient
            grad = node.inputs[0][0] if node.inputs else None
            for other in consumers.get(grad, ()):
                if view.nodes[other].op == "Conv2DBackpropFilter" and view.nodes[other].inputs[2][0] == grad:
                    yield "conv2d filter grad+bias grad (layout pass)", sorted({node.key, other})
        for name, inputs in forests:
            taken = inputs.get(node.key)
            if taken is not None:  # the root of a tree of two or more
                if not inputs.keys().isdisjoint(taken):
                    yield name, sorted(reach({node.key}, inputs))
                else:  # its inputs take in none (most trees)
                    yield name, sorted({node.key, *taken})


def _patterns_rooted_at(op, present):
    """[(pattern name, its trees whose root takes ``op``)] in PATTERNS order, leaving out trees needing an op
    type the graph lacks (``present``): a pattern's root is never a pass-through op, so a node matches only the
    trees rooted at its own op type (most nodes none)."""
    if op in PASS_THROUGH:
        return ()
    found = []
    for pattern in PATTERNS:
        trees = [tree for tree in pattern.trees if op in tree.ops and _possible(tree, present)]
        if trees:
            found.append((pattern.name, trees))
    return tuple(found)


def _possible(tree, present):
    """Whether every node of ``tree`` can take an op type of the graph."""
    return tree is ANY or (bool(tree.ops & present) and all(_possible(child, present) for child in tree.children))


def _match(view, key, pattern, assignments=None):
    """The keys a pattern matches at ``key`` (pass-through Identity nodes included), or None. ``assignments(count,
    tested)`` gives the ways to try the tested children against the inputs, in order (``_assignments`` if None)."""
    node, path = view.nodes.get(key), set()
    while (
        node is not None and not node.virtual and node.op in PASS_THROUGH and node.inputs and node.op not in pattern.ops
    ):
        path.add(node.key)
        node = view.nodes.get(node.inputs[0][0])
    if node is None or node.virtual or node.op not in pattern.ops:
        return None
    inputs = [src for src, _ in node.inputs]
    if pattern.children and len(inputs) != len(pattern.children):
        return None
    matched = path | {node.key}
    if not pattern.children:
        return matched
    children = [pattern.children[i] for i in pattern.tested]
    for inputs_taken in (assignments or _assignments)(len(inputs), pattern.tested):
        found = set()
        for child, index in zip(children, inputs_taken):
            sub = _match(view, inputs[index], child, assignments)
            if sub is None:
                break
            found |= sub
        else:
            return matched | found
    return None


@functools.cache
def _assignments(count, tested):
    """The inputs the children at positions ``tested`` take, over the orders of ``count`` inputs (permutations),
    each distinct assignment once, in the order the permutations first give it: the children of ANY match any input,
    so the first order whose tested children all match is the first such assignment."""
    return tuple(dict.fromkeys(tuple(order[i] for i in tested) for order in permutations(range(count))))


def _data_consumers(nodes):
    consumers = defaultdict(list)
    for node in nodes:
        key = node.key
        for src, _ in node.inputs:
            consumers[src].append(key)
    return consumers


def _tree_inputs(view, nodes):
    """[(group name, {node key: the inputs its tree takes in})] per GROUPS entry: the Add/AddN (or same-op) trees
    the arithmetic optimizer collapses, of ``nodes`` (real ones). A node of the group without control inputs takes
    in each input of the group (of its own op kind for a same-op group) that is joinable: of a tree's op types, no
    control edges in or out and one data consumer, so exactly one output edge (a node's outputs list one entry per
    edge). Every input has at most one such node, its only data consumer, so the trees are the subtrees of one
    forest per group, all made in one pass; whether an op joins a parent's op is worked out once per pair."""
    found = [{} for _ in GROUPS]
    joins = {}  # (op, parent's op) -> the found dicts of the groups where such a node joins such a parent
    by_key = view.nodes
    for node in nodes:
        if node.op not in TREE_OPS or len(node.outputs) != 1 or node.control_inputs:
            continue
        parent = by_key[node.outputs[0]]
        if parent.control_inputs:  # none may wait on the node, and a node with control inputs takes in none
            continue
        pair = (node.op, parent.op)
        tables = joins.get(pair)
        if tables is None:
            tables = joins[pair] = [table for group, table in zip(GROUPS, found) if _joins(group, *pair)]
        for table in tables:
            table.setdefault(parent.key, []).append(node.key)
    return [(group.name, table) for group, table in zip(GROUPS, found)]


def _joins(group, op, parent_op):
    """Whether a node of ``op`` joins a tree node of ``parent_op`` in ``group``."""
    kind, parent_kind = (group.aliases.get(o, o) for o in (op, parent_op))
    return kind in group.ops and parent_kind in group.ops and not (group.same_op and kind != parent_kind)
