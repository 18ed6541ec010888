"""Shape inference over a flattened run: each op instance's output (dtype, shape) list."""

import numpy as np

from msopt.errors import InputError
from msopt.graph.protos import DTYPE_NAMES, implausible_dims
from msopt.graph.view import MAIN

# From this many tasks on, the ops whose shapes stay unknown are found by a compiled pass first
# (below, loading numba and its cached machine code, about half a second, costs more than it saves).
COMPILED_FROM = 200000
_COUNTS_ONLY = frozenset({"Shape", "Size", "Rank"})  # int32 whatever their input


def infer_shapes(view, t, feeds):
    """Per task, [(dtype, shape)] by output index: signature inputs, recorded shapes, then propagation."""
    nodes = getattr(t, "node", None) or [view.nodes[key] for key in t.key]
    data_ptr, data_src, data_port = t.csr()[:3]
    ptr, sources, ports = data_ptr.tolist(), data_src.tolist(), data_port.tolist()
    n = len(nodes)
    result = [None] * n
    todo = range(n)
    if n >= COMPILED_FROM:
        state = _unknown_states(view, t, nodes, feeds, data_ptr, data_src, data_port)
        known = np.empty(3, object)  # one list per state, shared by its tasks (nobody changes a task's list)
        known[1], known[2] = [("float", None)], [("int32", None)]
        result = known[state].tolist()
        todo = np.flatnonzero(state == 0).tolist()
    unknown = ("float", None)
    recorded_shapes = {}  # serialized shape -> the one list of its sizes (msopt.simulator.shapes._recorded_shapes)
    same_shape = ELEMENTWISE_SAME_SHAPE
    for i in todo:
        node = nodes[i]
        proto = node.proto
        attr = proto.attr
        if feeds and node.function == MAIN and node.name in feeds:
            result[i] = [feeds[node.name]]
            continue
        a, b = ptr[i], ptr[i + 1]
        if attr:
            recorded = _recorded_shapes(proto, recorded_shapes)
            dtypes = _output_dtypes(proto)
            if recorded is not None and None not in recorded:
                if len(dtypes) < len(recorded):  # dtypes not in the attributes: the first input's, else float
                    first = result[sources[a]] if a < b else ()
                    port = ports[a] if a < b else 0
                    fallback = first[port][0] if port < len(first) else "float"
                    dtypes = dtypes + [dtypes[0] if dtypes else fallback] * (len(recorded) - len(dtypes))
                result[i] = list(zip(dtypes, recorded))
                continue
        else:
            dtypes = []
        op = node.op
        if op in same_shape:  # the first input's shape (and dtype unless the attributes say)
            if a < b:
                first = result[sources[a]]
                port = ports[a]
                dtype, shape = first[port] if port < len(first) else unknown
            else:
                dtype, shape = "float", None
            result[i] = [(dtypes[0] if dtypes else dtype, shape)]
            continue
        ins = [result[s][p] if p < len(result[s]) else unknown for s, p in zip(sources[a:b], ports[a:b])]
        in_protos = [nodes[s].proto for s in sources[a:b]] if op == "ConcatV2" else None
        result[i] = _propagate(op, proto, ins, dtypes, in_protos)
    return result


def _unknown_states(view, t, nodes, feeds, data_ptr, data_src, data_port):
    """Per task, 1 or 2 when its outputs are [("float" or "int32", None)] whatever the rules below read:
    an op without attributes that only reads such outputs (no rule then finds a shape); 0 otherwise."""
    n = len(nodes)
    plain = ~np.fromiter(map(view.attributed().__contains__, t.key), bool, n)
    if feeds:
        plain &= ~np.fromiter((node.function == MAIN and node.name in feeds for node in nodes), bool, n)
    counts_only = t.ops_in(_COUNTS_ONLY)
    from msopt.compiled.jit import compiled  # numba: loaded only for large runs

    global _unknown_outputs_compiled
    if _unknown_outputs_compiled is None:
        _unknown_outputs_compiled = compiled(_unknown_outputs)
    return _unknown_outputs_compiled(plain, counts_only, data_ptr, data_src, data_port)


_unknown_outputs_compiled = None


def _unknown_outputs(plain, counts_only, data_ptr, data_src, data_port):
    """The loop of ``_unknown_states`` (compiled): tasks in topological order, inputs before their readers."""
    state = np.zeros(len(plain), np.int8)  # 0: left to the rules, 1: [("float", None)], 2: [("int32", None)]
    for i in range(len(plain)):
        if not plain[i]:
            continue
        dtype = 1  # no input, or the first input past its task's one output: float
        ok = True
        for e in range(data_ptr[i], data_ptr[i + 1]):
            s, p = data_src[e], data_port[e]
            if state[s] == 0 or p < -1:  # an input the rules must read (or a port a list index refuses)
                ok = False
                break
            if e == data_ptr[i] and p <= 0:
                dtype = state[s]
        if ok:
            state[i] = 2 if counts_only[i] else dtype
    return state


def _recorded_shapes(proto, known=None):
    """The ``_output_shapes`` a node records (a list per output, None for an unknown rank), or None. ``known``
    ({serialized shape: its list}, shared by the calls of one pass) hands equal shapes one list: reading a shape's
    dims one by one costs more than serializing it (shape lists are never changed in place)."""
    attr = proto.attr
    if "_output_shapes" not in attr:
        return None
    known = {} if known is None else known
    shapes = []
    for s in attr["_output_shapes"].list.shape:
        if s.unknown_rank:
            shapes.append(None)
            continue
        raw = s.SerializeToString()
        shape = known.get(raw)
        if shape is None:
            shape = known[raw] = _plausible([d.size for d in s.dim])
        shapes.append(shape)
    return shapes


def _plausible(dims):
    """``dims``, or None (unknown) when no tensor has them (msopt.graph.protos.implausible_dims). A node's recorded shapes
    and its declared shape attributes are hints the passes could do without: an absurd one is ignored (the shape is
    then propagated, or stays unknown) rather than refused, and never counted. A signature's shapes are checked
    when the model loads (msopt.load), and refused there."""
    return None if implausible_dims(dims) is not None else dims


def _output_dtypes(proto):
    attr = proto.attr
    for name in ("T", "dtype", "out_type", "DstT", "Tout", "output_type", "Tvalues"):
        if name in attr:
            value = attr[name]
            if value.WhichOneof("value") == "type":
                return [DTYPE_NAMES.get(value.type, "float")]
            if value.WhichOneof("value") == "list" and value.list.type:
                return [DTYPE_NAMES.get(x, "float") for x in value.list.type]
    return []


ELEMENTWISE_SAME_SHAPE = {
    "Relu",
    "Relu6",
    "Elu",
    "Selu",
    "Sigmoid",
    "Tanh",
    "Softmax",
    "LogSoftmax",
    "Neg",
    "Abs",
    "Exp",
    "Log",
    "Sqrt",
    "Rsqrt",
    "Square",
    "Cast",
    "Identity",
    "ReadVariableOp",
    "FusedBatchNorm",
    "FusedBatchNormV2",
    "FusedBatchNormV3",
    "BiasAdd",
    "LeakyRelu",
    "Softplus",
    "Floor",
    "Ceil",
    "Round",
    "StopGradient",
    "Snapshot",
    "Erf",
    "Sign",
    "IsNan",
    "LogicalNot",
    "ZerosLike",
    "OnesLike",
    "Reciprocal",
    "Gelu",
    "Swish",
    "ClipByValue",
    "L2Loss",
}
BROADCAST_OPS = {
    "Add",
    "AddV2",
    "Sub",
    "Mul",
    "RealDiv",
    "Div",
    "Maximum",
    "Minimum",
    "Pow",
    "SquaredDifference",
    "FloorDiv",
    "FloorMod",
    "Greater",
    "GreaterEqual",
    "Less",
    "LessEqual",
    "Equal",
    "NotEqual",
    "LogicalAnd",
    "LogicalOr",
    "DivNoNan",
    "SelectV2",
    "Select",
    "AddN",
}


def _propagate(op, proto, ins, dtypes, in_protos):
    """Output (dtype, shape) list for common ops from their inputs; shape None where unknown."""
    attr = proto.attr
    dtype = dtypes[0] if dtypes else (ins[0][0] if ins else "float")
    first = ins[0][1] if ins else None
    if op in ("Placeholder", "PlaceholderWithDefault", "VarHandleOp", "VariableV2", "Variable"):
        s = attr["shape"].shape if "shape" in attr else None
        return [(dtype, None if s is None or s.unknown_rank else _plausible([d.size for d in s.dim]))]
    if op in ("Const", "HostConst") and "value" in attr:
        tensor = attr["value"].tensor
        return [(DTYPE_NAMES.get(tensor.dtype, "float"), _plausible([d.size for d in tensor.tensor_shape.dim]))]
    if op in ELEMENTWISE_SAME_SHAPE:
        return [(dtype, first)]
    if op in BROADCAST_OPS:
        return [(dtype, _broadcast([s for _, s in ins[-2:]] if op in ("Select", "SelectV2") else [s for _, s in ins]))]
    if op in ("MatMul", "_FusedMatMul") and len(ins) >= 2 and ins[0][1] is not None and ins[1][1] is not None:
        a, b = ins[0][1], ins[1][1]
        if len(a) != 2 or len(b) != 2:
            raise InputError(
                f"node '{proto.name}' ({op}) multiplies operands of shapes {a} and {b}: both must be matrices"
            )
        m = a[1] if flag(attr, "transpose_a") else a[0]
        n = b[0] if flag(attr, "transpose_b") else b[1]
        return [(dtype, [m, n])]
    if op in ("Conv2D", "_FusedConv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool") and first and len(first) == 4:
        return [(dtype, _window_shape(op, attr, first, ins[1][1] if len(ins) > 1 else None))]
    if op == "ConcatV2" and len(ins) >= 2:
        shapes = [s for _, s in ins[:-1]]
        if all(shapes) and len({len(s) for s in shapes}) == 1:
            axis = _const_int(in_protos[-1])
            out = list(shapes[0])
            if axis is not None and out:
                axis %= len(out)
                sizes = [s[axis] for s in shapes]
                out[axis] = sum(sizes) if all(x is not None and x >= 0 for x in sizes) else -1
                return [(dtype, out)]
        return [(dtype, None)]
    if op in ("Mean", "Sum", "Max", "Min", "Prod", "ArgMax", "ArgMin") and first:
        if flag(attr, "keep_dims"):
            return [(dtype, [1] * len(first))]
        return [(dtype, first[:1] if op not in ("ArgMax", "ArgMin") else first[:-1])]
    if op == "Pack" and first is not None:
        return [(dtype, [len(ins)] + list(first))]
    if op in ("Shape", "Size", "Rank"):
        return [("int32", [len(first)] if first is not None else None)]
    return [(dtype, None)]


def flag(attr, name):
    """A boolean attribute, False when absent (never index a proto map with a missing key: it inserts one)."""
    return name in attr and attr[name].b


def _const_int(proto):
    """The value of a scalar integer Const (a ConcatV2 axis), else None."""
    if proto is None or proto.op != "Const" or "value" not in proto.attr:
        return None
    tensor = proto.attr["value"].tensor
    values = list(tensor.int_val) or list(tensor.int64_val)
    return values[0] if len(values) == 1 else None


def _broadcast(shapes):
    if not shapes or any(s is None for s in shapes):
        return None
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    known = shapes
    rank = max(len(s) for s in known)
    out = []
    for k in range(rank):
        dims = [s[k - rank + len(s)] for s in known if k - rank + len(s) >= 0]
        big = [d for d in dims if d != 1]
        out.append(big[0] if big else 1)
    return out


def _window_shape(op, attr, x, w):
    nchw = "data_format" in attr and attr["data_format"].s == b"NCHW"
    h, wd = (x[2], x[3]) if nchw else (x[1], x[2])
    strides = list(attr["strides"].list.i) if "strides" in attr else [1, 1, 1, 1]
    if len(strides) != 4 or min(strides) < 1:
        return None  # TensorFlow refuses such a node; its size stays unknown here
    sh, sw = (strides[2], strides[3]) if nchw else (strides[1], strides[2])
    if op in ("MaxPool", "AvgPool"):
        k = list(attr["ksize"].list.i) if "ksize" in attr else [1, 1, 1, 1]
        if len(k) != 4:
            return None
        kh, kw = (k[2], k[3]) if nchw else (k[1], k[2])
        channels = x[1] if nchw else x[3]
    else:
        if not w or len(w) != 4:
            return None
        kh, kw = w[0], w[1]
        channels = w[2] * w[3] if op == "DepthwiseConv2dNative" else w[3]
    same = "padding" not in attr or attr["padding"].s != b"VALID"

    def out(size, k, s):
        if size is None or size < 0:
            return -1
        return -(-size // s) if same else (size - k) // s + 1

    oh, ow = out(h, kh, sh), out(wd, kw, sw)
    return [x[0], channels, oh, ow] if nchw else [x[0], oh, ow, channels]
