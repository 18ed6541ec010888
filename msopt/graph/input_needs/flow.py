"""The forward walk from a signature input to the ops that constrain its values, and to the shape a consumer wants."""

import numpy as np

from msopt.graph.input_needs.need import Need
from msopt.graph.input_needs.ops import (
    BRANCHES,
    CALLS,
    GATHERS,
    HASHES,
    LOOPS,
    OPAQUE,
    PASS_ALL_OUTPUTS,
    PASS_ANY,
    PASS_FIRST,
    PREDICATES,
    SAME_SHAPE,
)
from msopt.graph.input_needs.sources import Sources, static_dims

MAX_VISITS = 200_000


class Flow(Sources):
    """Follows a tensor to its readers (and through function returns to the callers), recording what they ask."""

    def __init__(self, view):
        super().__init__(view)
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
        shapes = [static_dims(s) for s in attr["dense_shapes"].list.shape]
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
