"""What the graph says each signature input must hold: id bounds, scalar predicates, string formats (protos only).

An input is followed forward through the ops that pass its values on unchanged (casts, reshapes,
slices, control flow, function calls and returns) to the ops that constrain them: a gather or
lookup reading a table (ids below its row count), ``OneHot`` (its depth), ``FloorMod`` (its modulus),
a range assertion (``x < c`` or ``c > max(x)``), a control-flow predicate (a scalar), and the string parsers.
"""

from dataclasses import dataclass, field

import numpy as np

from msopt.op_tables import CALL_OPS

# Ops whose output 0 carries the values of their input 0 (or of every data input for the n-ary ones).
# fmt: off
PASS_FIRST = {
    "Identity", "Cast", "Reshape", "ExpandDims", "Squeeze", "StridedSlice", "Slice", "Transpose", "Tile",
    "StopGradient", "Snapshot", "PreventGradient", "Enter", "RefEnter", "Exit", "RefExit", "NextIteration",
    "RefIdentity", "CheckNumerics", "EnsureShape", "PlaceholderWithDefault", "BroadcastTo", "ReverseV2",
    "Unique", "UniqueV2", "UniqueWithCounts", "GatherV2", "Gather", "GatherNd", "Bitcast", "StringToNumber",
    "Max",  # an assertion on max(ids) bounds every id
}
PASS_ANY = {"Pack", "ConcatV2", "Concat", "Merge", "RefMerge", "AddN", "StringJoin"}
PASS_ALL_OUTPUTS = {"Unpack", "Split", "SplitV", "Switch", "RefSwitch"}
CALLS = CALL_OPS
BRANCHES = {"If", "StatelessIf"}
LOOPS = {"While", "StatelessWhile"}
# Ops reading a table at the ids of input 1: (table input, dimension attr giving the row axis).
GATHERS = {"GatherV2": 0, "Gather": 0, "ResourceGather": 0, "SparseSegmentSum": 0, "SparseSegmentMean": 0,
           "SparseSegmentSqrtN": 0, "SparseSegmentSumWithNumSegments": 0, "SparseSegmentMeanWithNumSegments": 0,
           "SparseSegmentSqrtNWithNumSegments": 0}
HASHES = {"StringToHashBucket", "StringToHashBucketFast", "StringToHashBucketStrong", "LookupTableFind",
          "LookupTableFindV2", "StringLength", "StringLower", "StringUpper", "StringStrip", "Substr",
          "StaticRegexReplace", "RegexReplace", "StaticRegexFullMatch", "RegexFullMatch", "ReduceJoin", "Equal", "NotEqual", "UnicodeDecode", "UnicodeDecodeWithOffsets", "StringNGrams"}
# Parsers whose input format msopt does not generate: such an input must come from --inputs.
OPAQUE = {"DecodeJpeg", "DecodePng", "DecodeImage", "DecodeGif", "DecodeBmp", "DecodeAndCropJpeg", "DecodeRaw",
          "DecodeWav", "DecodeBase64", "DecodeCompressed", "DecodeProtoV2", "DecodeJSONExample",
          "ParseSequenceExample", "ParseSequenceExampleV2",
          "ParseSingleSequenceExample", "ParseTensor", "DeserializeSparse", "DeserializeManySparse"}
# Ops whose output has their input 0's shape: an input of unknown rank takes the shape a consumer past them needs.
SAME_SHAPE = {"Identity", "Cast", "StopGradient", "Snapshot", "Enter", "Exit", "NextIteration", "Merge", "Switch",
              "PlaceholderWithDefault", "CheckNumerics", "Relu", "Relu6", "Elu", "Selu", "Tanh", "Sigmoid", "Neg",
              "Abs", "Exp", "Log", "Square", "Sqrt", "Floor", "Round", "Sign", "LogicalNot"}
PREDICATES = {("Switch", 1), ("RefSwitch", 1), ("If", 0), ("StatelessIf", 0), ("Assert", 0), ("LoopCond", 0)}
# fmt: on
MAX_VISITS = 200_000


@dataclass
class Need:
    """What one input must hold. ``bound``: ids in [0, bound); ``unknown``: a lookup whose table size the
    graph does not record; ``scalar``: a control-flow predicate; ``text``: the string format, e.g.
    ("number", "int"), ("csv", [dtypes], delimiter), ("split", delimiter, inner text), ("opaque", op, node),
    ("example", [(feature key, dtype, value count or None, Need of the parsed values)]) for a tf.Example."""

    bound: int = None
    unknown: str = None
    scalar: bool = False
    text: tuple = None
    shape: list = None  # for an input of unknown rank: the shape a consumer needs (None: the batch dimension)
    sinks: list = field(default_factory=list)  # node keys that set the bound

    def limit(self, bound, key):
        if bound is not None and bound > 0 and (self.bound is None or bound < self.bound):
            self.bound = bound
            self.sinks.append(key)


def input_needs(view, inputs):
    """{input key: Need} for a signature's inputs ({key: spec with a tensor 'name'})."""
    flow = _Flow(view)
    needs = {}
    for key, spec in inputs.items():
        node = str(spec.get("name") or "").split(":")[0]
        need = Need()
        if node in view.nodes:
            port = int(str(spec["name"]).partition(":")[2] or 0)
            flow.follow(need, node, port)
            if spec.get("shape") is None and not need.scalar:
                need.shape = flow.shape_wanted(node, port)
        needs[key] = need
    return needs


class _Flow:
    def __init__(self, view):
        self.view = view
        self.readers = {}  # (source key, output index) -> [(consumer key, input index)]
        for node in view.nodes.values():
            for index, (src, port) in enumerate(node.inputs):
                if src in view.nodes:
                    self.readers.setdefault((src, self.port(view.nodes[src], port)), []).append((node.key, index))
        self.returns = {}  # (function, source key, output index) -> [output position]
        for info in view.functions.values():
            names = [arg.name for arg in info.proto.signature.output_arg]
            for out_name, (src, port) in info.returns.items():
                if src in view.nodes and out_name in names:
                    where = (src, self.port(view.nodes[src], port))
                    self.returns.setdefault(where, []).append((info.name, names.index(out_name)))

    def port(self, node, port):
        """The flat output index a reference names: an int in the main graph; 'out_arg:k' in a body."""
        if isinstance(port, int) or port is None:
            return port or 0
        name, _, index = str(port).partition(":")
        index = int(index) if index.isdigit() else 0
        named = {
            "output_false": 0,
            "output_true": 1,
            "y": 0,
            "idx": 1,
            "count": 2,
            "indices": 0,
            "values": 1,
            "shape": 2,
            "output_indices": 0,
            "output_values": 1,
        }
        if node.op in self.view.functions:
            return self.view.functions[node.op].output_index(port) or 0
        if node.op in ("ParseExample", "ParseExampleV2", "ParseSingleExample"):  # output lists, flattened
            sizes = [len(node.proto.attr[a].list.type) for a in ("sparse_types", "Tdense", "ragged_value_types")]
            first = {
                "sparse_values": sizes[0],
                "sparse_shapes": 2 * sizes[0],
                "dense_values": 3 * sizes[0],
                "ragged_values": 3 * sizes[0] + sizes[1],
                "ragged_row_splits": 3 * sizes[0] + sizes[1] + sizes[2],
            }
            return first.get(name, 0) + index
        if name in named and node.op not in CALLS | BRANCHES | LOOPS | {"IdentityN"}:
            return named[name]
        return index

    # -- the forward walk ------------------------------------------------------------------------
    def follow(self, need, start, port):
        todo, seen = [(start, port)], set()
        while todo and len(seen) < MAX_VISITS:
            where = todo.pop()
            if where in seen:
                continue
            seen.add(where)
            for consumer, index in self.readers.get(where, ()):
                todo.extend(self._step(need, self.view.nodes[consumer], index))
            for function, position in self.returns.get(where, ()):
                for caller in self.view.functions[function].callers:
                    todo.append((caller, position))

    def shape_wanted(self, start, port):
        """The shape the first shape-demanding consumer (MatMul, BiasAdd, Conv2D) reached through
        shape-preserving ops wants for this tensor; None when no such consumer says."""
        todo, seen = [(start, port)], set()
        while todo and len(seen) < MAX_VISITS:
            where = todo.pop(0)
            if where in seen:
                continue
            seen.add(where)
            for consumer, index in self.readers.get(where, ()):
                node = self.view.nodes[consumer]
                wanted = self._wanted(node, index)
                if wanted is not None:
                    return wanted
                if node.op in SAME_SHAPE and index == 0:
                    todo.extend((node.key, k) for k in (0, 1))
                elif node.calls and (node.op in CALLS or node.op in self.view.functions):
                    todo.extend(self._into(node.calls[0], index))
            for function, position in self.returns.get(where, ()):
                todo.extend((caller, position) for caller in self.view.functions[function].callers)
        return None

    def _wanted(self, node, index):
        attr = node.proto.attr
        if node.op in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3") and index == 0:
            flip_x, flip_w = ("transpose_a", "transpose_b") if node.op == "MatMul" else ("adj_x", "adj_y")
            weights = self.shape(*self.source(node, 1))
            if not attr[flip_x].b and weights and len(weights) == 2:
                inner = weights[1 if attr[flip_w].b else 0]
                return None if inner is None else [None, inner]
        if node.op == "BiasAdd" and index == 0:
            bias = self.shape(*self.source(node, 1))
            if bias and len(bias) == 1 and bias[0] is not None:
                return [None, bias[0]]
        if node.op in ("Conv2D", "DepthwiseConv2dNative") and index == 0 and attr["data_format"].s in (b"", b"NHWC"):
            kernel = self.shape(*self.source(node, 1))
            if kernel and len(kernel) == 4 and None not in kernel:
                return [None, 2 * kernel[0] + 8, 2 * kernel[1] + 8, kernel[2]]
        return None

    def _step(self, need, node, index):
        """Record what ``node`` asks of the value at its input ``index``; return the tensors carrying it on."""
        op, key = node.op, node.key
        if (op, index) in PREDICATES:
            need.scalar = True
            return []
        if op in GATHERS and index == 1:
            rows = self.rows(node)
            if rows is None:
                need.unknown = need.unknown or key
            need.limit(rows, key)
            return []
        if op == "OneHot" and index == 0:
            need.limit(self.const_int(node, 1), key)
            return []
        if op == "FloorMod" and index == 0:
            need.limit(self.const_int(node, 1), key)
            return []
        if op in ("Less", "LessEqual", "Greater", "GreaterEqual") and self._asserted(node):
            if index == (0 if op.startswith("Less") else 1):  # an asserted upper bound: x < c, or c > x
                bound = self.const_int(node, 1 - index)
                need.limit(None if bound is None else bound + op.endswith("Equal"), key)
            return []
        if op in OPAQUE:
            need.text = need.text or ("opaque", op, key)
            return []
        if op == "StringToNumber":
            kind = "int" if self._attr_type(node, "out_type") in (3, 9) else "float"
            self._text(need, ("number", kind))
            return [(key, 0)]
        if op == "DecodeCSV" and index == 0:
            types = list(node.proto.attr["OUT_TYPE"].list.type)
            delim = node.proto.attr["field_delim"].s.decode() if "field_delim" in node.proto.attr else ","
            self._text(need, ("csv", types, delim or ","))
            return []
        if op in ("StringSplit", "StringSplitV2") and index == 0:
            delim = self.const_str(node, 1)
            inner = Need()
            self.follow(inner, key, 1)
            self._text(need, ("split", delim if delim else " ", inner.text))
            need.limit(inner.bound, key)
            return []
        if op in ("ParseExample", "ParseExampleV2", "ParseSingleExample") and index == 0:
            features = self._example_features(node)
            self._text(need, ("example", features) if features is not None else ("opaque", op, key))
            for _, _, _, inner in features or ():
                if inner.text and inner.text[0] == "opaque":
                    self._text(need, inner.text)
                need.unknown = need.unknown or (inner.unknown if inner.bound is None else None)
            return []
        if op in HASHES:
            return []
        if node.calls and (op in CALLS or op in self.view.functions):
            return self._into(node.calls[0], index)
        if op in BRANCHES:
            return [w for f in self._branch_functions(node) for w in self._into(f, index - 1)]
        if op in LOOPS:
            return [w for f in node.calls for w in self._into(f, index)] + [(key, index)]
        if op == "Case":
            if index == 0:
                need.limit(len(node.calls), key)
                return []
            return [w for f in node.calls for w in self._into(f, index - 1)]
        if op in PASS_FIRST and index == 0 or op in PASS_ANY or op in ("Select", "SelectV2") and index > 0:
            return [(key, 0)]
        if op in PASS_ALL_OUTPUTS and index == 0:
            return [(key, k) for k in range(8)]
        if op == "IdentityN":
            return [(key, index)]
        if op == "SparseFillEmptyRows" and index == 1:
            return [(key, 1)]
        return []

    def _example_features(self, node):
        """[(key, dtype, count, Need)] of the tf.Example features a parse op reads; None if its keys are not Consts."""
        attr = node.proto.attr
        dense_types = list(attr["Tdense"].list.type)
        sparse_types = list(attr["sparse_types"].list.type)
        if node.op == "ParseSingleExample":
            sparse_keys = [k.decode() for k in attr["sparse_keys"].list.s]
            dense_keys = [k.decode() for k in attr["dense_keys"].list.s]
        elif node.op == "ParseExample":
            sparse_keys = [self.const_str(node, 2 + k) for k in range(len(sparse_types))]
            dense_keys = [self.const_str(node, 2 + len(sparse_types) + k) for k in range(len(dense_types))]
        else:
            sparse_keys, dense_keys = self.const_strs(node, 2), self.const_strs(node, 3)
            ragged_keys, ragged_types = self.const_strs(node, 4), list(attr["ragged_value_types"].list.type)
            if ragged_keys is None or len(ragged_keys) != len(ragged_types):
                return None
            sparse_keys, sparse_types = (
                sparse_keys + ragged_keys if sparse_keys is not None else None,
                sparse_types + ragged_types,
            )
        if (
            sparse_keys is None
            or dense_keys is None
            or None in sparse_keys + dense_keys
            or len(sparse_keys) != len(sparse_types)
            or len(dense_keys) != len(dense_types)
        ):
            return None
        shapes = [_dims(s) for s in attr["dense_shapes"].list.shape]
        sparse = len(attr["sparse_types"].list.type)
        features = []
        for k, (name, dtype) in enumerate(zip(dense_keys, dense_types)):
            dims = shapes[k] if k < len(shapes) else None
            count = int(np.prod(dims)) if dims is not None and None not in dims else 1
            features.append((name, dtype, count, self._parsed(node, 3 * sparse + k)))
        for k, (name, dtype) in enumerate(zip(sparse_keys, sparse_types)):
            port = sparse + k if k < sparse else 3 * sparse + len(dense_types) + (k - sparse)
            features.append((name, dtype, None, self._parsed(node, port)))
        return features

    def _parsed(self, node, port):
        """What the values a parse op writes at output ``port`` must be, as for an input."""
        inner = Need()
        self.follow(inner, node.key, port)
        return inner

    def const_strs(self, node, index):
        tensor = self.const_value(node, index)
        return None if tensor is None else [v.decode(errors="replace") for v in tensor.string_val]

    def _text(self, need, text):
        order = ("opaque", "example", "csv", "split", "number")
        if need.text is None or order.index(text[0]) < order.index(need.text[0]):
            need.text = text

    def _into(self, function, index):
        info = self.view.functions.get(function)
        if info is None or index < 0 or index >= len(info.args):
            return []
        return [(info.args[index], 0)]

    def _branch_functions(self, node):
        return [node.proto.attr[a].func.name for a in ("then_branch", "else_branch") if a in node.proto.attr]

    def _asserted(self, node, depth=4):
        """A comparison whose result reaches an Assert: a range check on the ids."""
        frontier = [node.key]
        for _ in range(depth):
            frontier = [c for k in frontier for c in self.view.nodes[k].outputs]
            if any(self.view.nodes[k].op == "Assert" for k in frontier):
                return True
        return False

    # -- what constants and variables say ------------------------------------------------------------
    def source(self, node, index):
        if index >= len(node.inputs):
            return None, 0
        src, port = node.inputs[index]
        return (src, self.port(self.view.nodes[src], port)) if src in self.view.nodes else (None, 0)

    def const_value(self, node, index, depth=0):
        """The Const tensor behind input ``index`` of ``node`` (through identities and call arguments)."""
        src, _ = self.source(node, index)
        return self._const(src, depth)

    def _const(self, key, depth=0):
        if key is None or depth > 50:
            return None
        node = self.view.nodes[key]
        if node.virtual:
            for caller, position in self._arg_sources(node):
                value = self.const_value(caller, position, depth + 1)
                if value is not None:
                    return value
            return None
        if node.op == "Const":
            return node.proto.attr["value"].tensor
        if node.op in ("Identity", "Enter", "Cast") and node.inputs:
            return self._const(self.source(node, 0)[0], depth + 1)
        return None

    def const_int(self, node, index):
        tensor = self.const_value(node, index)
        values = _ints(tensor) if tensor is not None else []
        return int(values[0]) if len(values) == 1 else None

    def const_str(self, node, index):
        tensor = self.const_value(node, index)
        if tensor is None or not tensor.string_val:
            return None
        return tensor.string_val[0].decode(errors="replace")

    def rows(self, node):
        """Row count of the table a gather-like ``node`` reads, or None when the graph does not say."""
        axis = 0
        if node.op == "GatherV2":
            axis = self.const_int(node, 2)
            if axis is None:
                return None
        if "batch_dims" in node.proto.attr:
            axis += node.proto.attr["batch_dims"].i if node.op == "ResourceGather" else 0
        src, port = self.source(node, 0)
        shape = self.shape(src, port)
        if shape is None or axis < 0 or axis >= len(shape) or shape[axis] is None:
            return None
        return shape[axis]

    def shape(self, key, port=0, depth=0):
        """Static shape of a tensor (list, None per unknown dimension) or None when unrecorded."""
        if key is None or depth > 50:
            return None
        node = self.view.nodes[key]
        if node.virtual:
            shapes = [
                self.shape(*self.source(caller, position), depth + 1) for caller, position in self._arg_sources(node)
            ]
            shapes = [s for s in shapes if s is not None]
            if not shapes or any(len(s) != len(shapes[0]) for s in shapes):
                return None
            # Several callers: the smallest table bounds ids valid for every one of them.
            return [None if None in dims else min(dims) for dims in zip(*shapes)]
        attr = node.proto.attr
        if node.op in ("VarHandleOp", "VariableV2", "Variable", "TemporaryVariable") and "shape" in attr:
            return _dims(attr["shape"].shape)
        if node.op == "Const":
            return _dims(attr["value"].tensor.tensor_shape)
        if (
            node.op
            in (
                "ReadVariableOp",
                "Identity",
                "Enter",
                "RefEnter",
                "Switch",
                "RefSwitch",
                "Snapshot",
                "StopGradient",
                "RefIdentity",
            )
            and node.inputs
        ):
            found = self.shape(*self.source(node, 0), depth + 1)
            if found is not None:
                return found
        if "_output_shapes" in attr and port < len(attr["_output_shapes"].list.shape):
            return _dims(attr["_output_shapes"].list.shape[port])
        return None

    def _arg_sources(self, arg):
        """(caller node, input index) pairs feeding the function argument ``arg``."""
        info = self.view.functions.get(arg.function)
        if info is None or arg.key not in info.args:
            return []
        position = info.args.index(arg.key)
        found = []
        for caller_key in info.callers:
            caller = self.view.nodes[caller_key]
            offset = 1 if caller.op in BRANCHES or caller.op == "Case" else 0
            found.append((caller, position + offset))
        return found

    @staticmethod
    def _attr_type(node, name):
        return node.proto.attr[name].type if name in node.proto.attr else None


def _dims(shape):
    if shape.unknown_rank:
        return None
    return [d.size if d.size >= 0 else None for d in shape.dim]


def _ints(tensor):
    """The integer values of a small Const tensor (scalar or one element)."""
    values = list(tensor.int_val) or list(tensor.int64_val)
    if not values and tensor.tensor_content and tensor.dtype in (3, 9):
        values = list(np.frombuffer(tensor.tensor_content, np.int32 if tensor.dtype == 3 else np.int64))
    return values
