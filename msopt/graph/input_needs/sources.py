"""What a graph's constants, variables and recorded shapes say about a tensor (the bounds' sources)."""

import numpy as np

from msopt.graph.input_needs.ops import BRANCHES, CALLS, LOOPS


class Sources:
    """Reads constant values, table row counts and static shapes behind a node's inputs, across function calls."""

    def __init__(self, view):
        self.view = view

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

    def const_strs(self, node, index):
        tensor = self.const_value(node, index)
        return None if tensor is None else [v.decode(errors="replace") for v in tensor.string_val]

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
            return static_dims(attr["shape"].shape)
        if node.op == "Const":
            return static_dims(attr["value"].tensor.tensor_shape)
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
            return static_dims(attr["_output_shapes"].list.shape[port])
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


def static_dims(shape):
    if shape.unknown_rank:
        return None
    return [d.size if d.size >= 0 else None for d in shape.dim]


def _ints(tensor):
    """The integer values of a small Const tensor (scalar or one element)."""
    values = list(tensor.int_val) or list(tensor.int64_val)
    if not values and tensor.tensor_content and tensor.dtype in (3, 9):
        values = list(np.frombuffer(tensor.tensor_content, np.int32 if tensor.dtype == 3 else np.int64))
    return values
