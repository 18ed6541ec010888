"""One graph view over a model's main graph and every function body, the same for TF1 and TF2.

A node's key is its name in the main graph and ``function:name`` inside a function body
(TensorFlow node names never contain ':'). Function arguments appear as virtual ``_Arg``
nodes so that edges from them are explicit; they carry no NodeDef and are never assigned.
"""

from array import array
from collections import Counter
from itertools import chain

from msopt.graph.host_only import STRING_ATTRS, says_string

MAIN = ""  # the function name of the main graph
STREAM_ATTR = "_stream_id"
# Private attributes the constraints' linkers look for (colocation, XLA clusters): noted while the calls are read.
NOTED_ATTRS = ("_class", "_xla_compile_id", "_XlaCompile")


def node_key(function, name):
    return f"{function}:{name}" if function else name


class Node:
    __slots__ = ("key", "name", "op", "function", "proto", "inputs", "control_inputs", "outputs", "calls")

    def __init__(self, key, name, op, function, proto):
        self.key = key
        self.name = name
        self.op = op
        self.function = function  # enclosing function name, MAIN for the main graph
        self.proto = proto  # the NodeDef, None for a virtual _Arg
        self.inputs = []  # data inputs: (source key, output index or name) in input order
        self.control_inputs = ()  # keys (a list once there is one: most nodes share this empty tuple)
        self.outputs = []  # keys of data and control consumers
        self.calls = ()  # names of library functions this node calls (a list if any)

    @property
    def virtual(self):
        return self.proto is None

    @property
    def stream(self):
        """The ``_stream_id`` already on the node, or None."""
        if self.proto is not None and STREAM_ATTR in self.proto.attr:
            return self.proto.attr[STREAM_ATTR].i
        return None

    @property
    def device(self):
        return self.proto.device if self.proto is not None else ""

    @property
    def scope(self):
        """Name-scope path of the node ('' at top level)."""
        return self.name.rpartition("/")[0]

    def __repr__(self):
        return f"Node({self.key!r}, {self.op})"


DT_RESOURCE = 20
REF_OFFSET = 100  # DataType values above 100 are reference types


def carries_handle(arg):
    """Whether a function argument (an ArgDef) is a resource handle or a reference."""
    dtype = arg.type
    return dtype == DT_RESOURCE or dtype > REF_OFFSET or arg.is_ref


class FunctionInfo:
    __slots__ = ("name", "proto", "args", "returns", "callers", "handle_args")

    def __init__(self, name, proto):
        self.name = name
        self.proto = proto
        self.args = []  # keys of the virtual _Arg nodes, in signature order
        self.returns = {}  # output arg name -> (source key, output)
        self.callers = []  # keys of nodes calling this function
        self.handle_args = []  # keys of the arguments that are resource handles or references (msopt.planning.links)

    def output_index(self, port):
        """Which output of a call to this function ``port`` names: 2 (main graph), or in a body
        'identity:0' (the callee's own output arg) or 'output:2' (PartitionedCall's output list)."""
        if port is None or isinstance(port, int):
            return port
        name, _, index = str(port).partition(":")
        names = [arg.name for arg in self.proto.signature.output_arg]
        if name in names:
            return names.index(name)
        index = index or "0"
        return int(index) if index.isdigit() else None


class GraphView:
    """Nodes, data and control edges, and calls of one MetaGraph's graph and its function library."""

    def __init__(self, graph_def):
        self.nodes = {}
        self.functions = {}
        self.bodies = {}  # function -> its real nodes, in the view's order (the main graph's first)
        self.main_input_sources = array("i")  # per data input of the main graph, its source's place (_add_graph)
        self._by_op = None  # (real nodes, op types, each node's op type code): made when first asked
        library = {f.signature.name: f for f in graph_def.library.function}
        # Found where the calls are read from every node's attributes (with a library; None without one, and then
        # their readers read the attributes): the keys whose dtype attributes say string (msopt.graph.host_only), and
        # the keys carrying each of NOTED_ATTRS.
        self.string_typed = set() if library else None
        self._noted = {name: set() for name in NOTED_ATTRS} if library else None
        self._reading = {**dict.fromkeys(STRING_ATTRS), **(self._noted or {})}  # attribute name -> where it is noted
        self._read_notes = None  # without a library: attribute_notes() read in one pass when first asked
        self._attributed = set() if library else None  # keys of the real nodes with attributes (attributed())
        self._add_graph(MAIN, graph_def.node, library)
        for name, fdef in library.items():
            info = FunctionInfo(name, fdef)
            self.functions[name] = info
            for arg in fdef.signature.input_arg:
                key = node_key(name, arg.name)
                self.nodes[key] = Node(key, arg.name, "_Arg", name, None)
                info.args.append(key)
                if carries_handle(arg):  # read here, where each argument is read anyway
                    info.handle_args.append(key)
            self._add_graph(name, fdef.node_def, library)
            for out_name in sorted(fdef.ret):  # protobuf map order differs between processes
                info.returns[out_name] = self._source(name, fdef.ret[out_name])
        for node in self.nodes.values():
            for fn in node.calls:
                self.functions[fn].callers.append(node.key)

    def _add_graph(self, function, node_defs, library):
        # One string object per name and op type: a view of a million nodes holds each once (keys, names, op types
        # and edge sources share them), not a copy per reading of the proto.
        added, nodes, ops, position = [], self.nodes, {}, {}
        pairs = {}  # (source, output): one tuple shared by the output's readers (at a million nodes, ~50 MB less)
        for nd in node_defs:
            name, op = nd.name, nd.op
            key = node_key(function, name)
            node = Node(key, name, ops.setdefault(op, op), function, nd)
            if library:  # only library functions are called
                node.calls = self._called_functions(nd, library, key) or ()
            nodes[key] = node
            position[key] = len(added)
            added.append(node)
        self.bodies[function] = added
        # In the main graph, per data input in order: its source's place in the graph (msopt.graph.flat numbers a large
        # run's edges from these instead of looking every source up by key; function bodies are looked up by key).
        main, sources = function == MAIN, self.main_input_sources
        for node in added:
            for ref in node.proto.input:
                if ref.startswith("^"):
                    source = nodes.get(node_key(function, ref[1:]))
                    if source is not None:
                        if not node.control_inputs:
                            node.control_inputs = []
                        node.control_inputs.append(source.key)
                        source.outputs.append(node.key)
                    continue
                src, port = self._source(function, ref)
                at = position.get(src, -1)
                source = added[at] if at >= 0 else nodes.get(src)
                if source is not None:
                    pair = (source.key, port)
                    node.inputs.append(pairs.setdefault(pair, pair))
                    source.outputs.append(node.key)
                    if main:
                        sources.append(at)

    def _called_functions(self, node_def, library, key):
        """The library functions ``node_def`` calls; on the way (reading the attributes is most of the cost), ``key``
        is noted as string-typed or as carrying one of NOTED_ATTRS."""
        called, reading = [], self._reading
        if node_def.op in library:
            called.append(node_def.op)
        names = sorted(node_def.attr)
        if names:
            self._attributed.add(key)
        for attr_name in names:  # a stable order: map order differs between processes
            value = node_def.attr[attr_name]
            kind = value.WhichOneof("value")
            if kind == "func" and value.func.name in library:
                called.append(value.func.name)
            elif kind == "list":
                called.extend(f.name for f in value.list.func if f.name in library)
            if attr_name in reading:
                noted = reading[attr_name]
                if noted is not None:
                    noted.add(key)
                elif says_string(value, kind):
                    self.string_typed.add(key)
        return called

    @staticmethod
    def _source(function, ref):
        """(source key, output) of an input reference in the main graph or a function body."""
        parts = ref.split(":")
        if function == MAIN:
            return parts[0], int(parts[1]) if len(parts) > 1 else 0
        # In a function body: "arg", "node:out_arg:index".
        port = ":".join(parts[1:]) if len(parts) > 1 else 0
        return node_key(function, parts[0]), port

    # -- queries ---------------------------------------------------------------------------
    def real_nodes(self):
        """Every node that has a NodeDef (what a partition assigns), in the view's order."""
        return chain.from_iterable(self.bodies.values())

    def of_ops(self, wanted):
        """The real nodes whose op type ``wanted(op)`` accepts, in the view's order (one test per op type)."""
        if self._by_op is None:  # every real node, and its op type's code into the distinct op types (numpy)
            from msopt.graph.tasks import op_codes

            real = list(self.real_nodes())
            self._by_op = (real, *op_codes([node.op for node in real]))
        real, names, codes = self._by_op
        table = [wanted(op) for op in names]
        if not any(table):
            return []
        import numpy as np

        return list(map(real.__getitem__, np.flatnonzero(np.array(table, bool)[codes]).tolist()))

    def attribute_notes(self):
        """(the string-typed keys, {name of NOTED_ATTRS: the keys carrying it}) over every real node. A view with a
        library noted them while reading the calls (``string_typed``); one without reads every node's attributes
        once, when first asked, for the host-only test and every linker at once."""
        if self._noted is not None:
            return self.string_typed, self._noted
        if self._read_notes is None:
            string_typed, noted = set(), {name: set() for name in NOTED_ATTRS}
            reading = sorted({**dict.fromkeys(STRING_ATTRS), **noted}.items())
            nodes = self.nodes
            for key in self.attributed():
                attr = nodes[key].proto.attr
                for name, where in reading:
                    if name in attr:
                        if where is not None:
                            where.add(key)
                        elif says_string(value := attr[name], value.WhichOneof("value")):
                            string_typed.add(key)
            self._read_notes = string_typed, noted
        return self._read_notes

    def attributed(self):
        """The keys of the real nodes carrying any attribute: noted while reading the calls in a view with a library,
        else found in one pass when first asked (most nodes of a large graph without a library have none)."""
        if self._attributed is None:
            self._attributed = {node.key for node in self.real_nodes() if node.proto.attr}
        return self._attributed

    def has_attr(self, node, name):
        """Whether ``node`` (a real one) carries attribute ``name`` (of NOTED_ATTRS)."""
        return node.key in self._noted[name] if self._noted is not None else name in node.proto.attr

    def with_attr(self, nodes, *names):
        """The nodes of ``nodes`` (real ones) carrying any of the attributes ``names`` (of NOTED_ATTRS), in order."""
        notes = self.attribute_notes()[1]
        noted = set().union(*(notes[name] for name in names))
        return [node for node in nodes if node.key in noted] if noted else []

    def edges(self):
        """Yield (source key, destination key, is_control) for every edge between nodes."""
        for node in self.nodes.values():
            for src, _ in node.inputs:
                yield src, node.key, False
            for src in node.control_inputs:
                yield src, node.key, True

    def op_histogram(self):
        return Counter(n.op for n in self.real_nodes())


def reach(found, edges):
    """``found`` (a set, grown in place and returned) with everything reachable from it through ``edges`` (a dict:
    key -> keys). Written out here: the graphs it walks are small dicts of keys, where building a scipy matrix
    would cost more than the walk."""
    pending = list(found)
    while pending:
        for other in edges.get(pending.pop(), ()):
            if other not in found:
                found.add(other)
                pending.append(other)
    return found
