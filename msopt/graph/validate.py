"""Refuse malformed graphs before any pass reads them or any model is written; each error names the node.

Checked over the main graph and every function body: node names (present, unique, no ':'),
input references (well formed, naming a node or argument that exists), data and control
cycles (a v1 while loop's NextIteration -> Merge back edge excepted), calls to functions the
library lacks, dtype attributes holding DT_INVALID (0), shapes of negative or impossible size,
``_stream_id`` attributes that are not a non-negative integer, and the nesting depth of calls;
and the TF2 object graph's references. ``inspect`` refuses such a model too, naming the defect.
"""

import re

from msopt.errors import InputError
from msopt.graph.op_tables import BACK_EDGE_OPS
from msopt.graph.order import kahn_order
from msopt.graph.view import STREAM_ATTR

# Call ops and the attributes naming the functions they run (each must be in the library).
CALL_ATTRS = {
    "PartitionedCall": ("f",),
    "StatefulPartitionedCall": ("f",),
    "If": ("then_branch", "else_branch"),
    "StatelessIf": ("then_branch", "else_branch"),
    "While": ("cond", "body"),
    "StatelessWhile": ("cond", "body"),
    "Case": ("branches",),
    "StatelessCase": ("branches",),
}
PLAIN_KINDS = frozenset({"s", "i", "f", "b"})  # attribute values with nothing to check (but _stream_id)
MAX_CALL_DEPTH = 100  # nested calls; real models nest a handful deep, and the passes recurse once per level
MAX_ELEMENTS = 2**63 - 1  # TensorFlow's limit on a tensor's element count (int64)
MAX_PORT_DIGITS = 9
# What may follow "node:" in an input: an output index in the main graph; in a function body also
# "out_arg:index" or "out_arg" (a bare argument or node name has no colon).
MAIN_PORT = re.compile(r"\d{1,%d}" % MAX_PORT_DIGITS)
BODY_PORT = re.compile(r"\d{1,%d}|[A-Za-z_][\w./-]*(?::\d{1,%d})?" % (MAX_PORT_DIGITS, MAX_PORT_DIGITS))


def validate(graph_def, where):
    """Raise InputError for the first defect of ``graph_def`` (a GraphDef); ``where`` names the file."""
    library = {}
    for fdef in graph_def.library.function:
        name = fdef.signature.name
        if not name:
            raise InputError(f"{where}: a library function without a name")
        if name in library:
            raise InputError(f"{where}: function '{name}' is defined twice")
        library[name] = fdef
    edges = _Edges()
    calls = {"": _check_body(where, "", graph_def.node, (), library, edges)}
    for name, fdef in library.items():
        args = [arg.name for arg in fdef.signature.input_arg]
        calls[name] = _check_body(where, name, fdef.node_def, args, library, edges)
        names = {nd.name for nd in fdef.node_def}
        for out_name in sorted(fdef.ret):
            ref = fdef.ret[out_name]
            head, colon, port = ref.partition(":")
            if (colon and BODY_PORT.fullmatch(port) is None) or (head not in names and head not in args):
                raise InputError(
                    f"{where}: function '{name}' returns '{ref}' as '{out_name}', which is not in its body"
                )
    _check_acyclic(where, edges)
    _check_call_depth(where, calls)


class _Edges:
    """Every graph's and body's vertices (arguments, then nodes) numbered together, and their edges."""

    def __init__(self):
        self.names = []  # vertex -> (function, node or argument name)
        self.sources = []
        self.targets = []


def validate_objects(object_graph, where):
    """A TF2 object graph's references (children, captured inputs) must name objects that exist."""
    count = len(object_graph.nodes)
    for position, obj in enumerate(object_graph.nodes):
        for child in obj.children:
            if not 0 <= child.node_id < count:
                raise InputError(
                    f"{where}: object {position} has child '{child.local_name}' = object {child.node_id}, "
                    f"but the object graph has {count} objects"
                )
    for name in sorted(object_graph.concrete_functions):
        for object_id in object_graph.concrete_functions[name].bound_inputs:
            if not 0 <= object_id < count:
                raise InputError(
                    f"{where}: function '{name}' captures object {object_id}, but the object graph has {count} objects"
                )


def _in(function):
    return f" in function '{function}'" if function else ""


def _check_body(where, function, node_defs, args, library, edges):
    """Check one graph or function body, adding its edges; returns [(node name, called function)]."""
    nodes = list(node_defs)
    names = [nd.name for nd in nodes]
    ops = [nd.op for nd in nodes]
    offset = len(edges.names)
    index = dict(zip(args, range(offset, offset + len(args))))
    index.update(zip(names, range(offset + len(args), offset + len(args) + len(names))))
    joined = "\0" + "\0".join(names)
    if (
        len(index) != len(args) + len(names)
        or not all(ops)
        or "\0\0" in joined + "\0"
        or ":" in joined
        or "\0^" in joined
    ):
        _check_names(where, function, names, ops, args)
    edges.names.extend((function, name) for name in args)
    edges.names.extend((function, name) for name in names)
    back = {name for name, op in zip(names, ops) if op in BACK_EDGE_OPS}
    pattern = BODY_PORT if function else MAIN_PORT
    ports = {}  # port text -> well formed (a few distinct ports recur thousands of times)
    sources, targets, calls = edges.sources, edges.targets, []
    add_source, add_target = sources.append, targets.append
    for target, nd in enumerate(nodes, offset + len(args)):
        for ref in nd.input:
            source = index.get(ref)  # the common case: a plain node name
            if source is None:
                control = ref[:1] == "^"
                head, colon, port = ref[control:].partition(":")
                good = ports.get(port)
                if good is None:
                    good = ports[port] = pattern.fullmatch(port) is not None
                if (colon and (control or not good)) or not head:
                    raise InputError(f"{where}: node '{nd.name}'{_in(function)} has a malformed input '{ref}'")
                source = index.get(head)
                if source is None:
                    raise InputError(
                        f"{where}: node '{nd.name}'{_in(function)} reads '{ref}', which is not in the graph"
                    )
                if back and not control and head in back:
                    continue  # a v1 while loop's back edge
            elif back and ref in back:
                continue
            add_source(source)
            add_target(target)
        attr = nd.attr
        plain = nd.op not in library and nd.op not in CALL_ATTRS
        for key in attr:  # the common attributes inline: a full check per node would double the time
            value = attr[key]
            kind = value.WhichOneof("value")
            if not ((kind == "type" and value.type) or kind in PLAIN_KINDS) or key == STREAM_ATTR:
                plain = False
                break
        if not plain:
            called = _check_attrs(where, function, nd, library)
            if called:
                calls.extend((nd.name, callee) for callee in called)
    return calls


def _check_names(where, function, names, ops, args):
    """The first node whose name or op is missing, repeated or malformed."""
    seen = set(args)
    for name, op in zip(names, ops):
        if not name or not op:
            raise InputError(f"{where}: a node without a name or op ({name or '?'}){_in(function)}: corrupt graph")
        if name in seen:
            raise InputError(f"{where}: node name '{name}' appears twice{_in(function)}")
        if ":" in name or name[0] == "^":
            raise InputError(f"{where}: node name '{name}'{_in(function)} contains ':' or starts with '^'")
        seen.add(name)
    raise InputError(f"{where}: argument names repeat{_in(function)}")


def _check_attrs(where, function, nd, library):
    """Check dtypes, shapes and the stream id of one node; returns the library functions it calls."""
    called = [nd.op] if nd.op in library else []
    for attr_name in nd.attr:
        value = nd.attr[attr_name]
        kind = value.WhichOneof("value")
        if attr_name == STREAM_ATTR:
            if kind != "i" or value.i < 0:
                shown = getattr(value, kind) if kind and kind != "list" else (kind or "nothing")
                raise InputError(
                    f"{where}: node '{nd.name}'{_in(function)} has {STREAM_ATTR} {shown!r} "
                    f"({kind or 'empty'}); a stream id is an integer >= 0"
                )
        elif kind == "type":
            if value.type == 0:
                raise InputError(
                    f"{where}: node '{nd.name}'{_in(function)} has attribute '{attr_name}' = DT_INVALID (dtype 0)"
                )
        elif kind == "shape":
            _check_shape(where, function, nd, attr_name, value.shape)
        elif kind == "tensor":
            if value.tensor.dtype == 0:
                raise InputError(
                    f"{where}: node '{nd.name}'{_in(function)} has a tensor '{attr_name}' of dtype 0 (DT_INVALID)"
                )
            _check_shape(where, function, nd, attr_name, value.tensor.tensor_shape)
        elif kind == "func":
            if value.func.name in library:
                called.append(value.func.name)
        elif kind == "list":
            if 0 in value.list.type:
                raise InputError(
                    f"{where}: node '{nd.name}'{_in(function)} has DT_INVALID (dtype 0) in attribute '{attr_name}'"
                )
            for shape in value.list.shape:
                _check_shape(where, function, nd, attr_name, shape)
            called.extend(f.name for f in value.list.func if f.name in library)
    if nd.op == "Const" and "value" in nd.attr and "_output_shapes" in nd.attr:
        _check_const_shape(where, function, nd)
    for attr_name in CALL_ATTRS.get(nd.op, ()):
        value = nd.attr[attr_name] if attr_name in nd.attr else None
        names = (
            ([value.func.name] if value.WhichOneof("value") == "func" else [f.name for f in value.list.func])
            if value
            else []
        )
        if not names:
            raise InputError(f"{where}: {nd.op} node '{nd.name}'{_in(function)} names no function in '{attr_name}'")
        for callee in names:
            if callee not in library:
                raise InputError(
                    f"{where}: node '{nd.name}'{_in(function)} calls function '{callee}', "
                    f"which is not in the graph's library"
                )
    return called


def _check_const_shape(where, function, nd):
    """A Const's recorded output shape must be its value's shape: passes trust the recorded one."""
    recorded = nd.attr["_output_shapes"].list.shape
    actual = [d.size for d in nd.attr["value"].tensor.tensor_shape.dim]
    if len(recorded) != 1 or recorded[0].unknown_rank:
        if len(recorded) > 1:
            raise InputError(
                f"{where}: Const node '{nd.name}'{_in(function)} records {len(recorded)} output shapes; it has one output"
            )
        return
    shape = [d.size for d in recorded[0].dim]
    if len(shape) != len(actual) or any(r != a and r != -1 for r, a in zip(shape, actual)):
        raise InputError(
            f"{where}: Const node '{nd.name}'{_in(function)} records shape {shape} in _output_shapes, "
            f"but its value has shape {actual}"
        )


def _check_shape(where, function, nd, attr_name, shape):
    if shape.unknown_rank:
        return
    elements = 1
    for dim in shape.dim:
        size = dim.size
        if size < -1:
            raise InputError(
                f"{where}: node '{nd.name}'{_in(function)} has dimension {size} in '{attr_name}'; "
                f"sizes are >= 0, or -1 for unknown"
            )
        if size > 0:
            elements *= size
    if elements > MAX_ELEMENTS:
        dims = ", ".join(str(d.size) for d in shape.dim[:8]) + (", ..." if len(shape.dim) > 8 else "")
        raise InputError(
            f"{where}: node '{nd.name}'{_in(function)} has shape [{dims}] in '{attr_name}': more than 2^63-1 elements"
        )


def _check_acyclic(where, edges):
    """A cycle of data or control edges (loop back edges excepted) means TensorFlow would never run it.

    Kahn's order over all bodies at once (numbered together); scipy's strongly connected components
    or the standard library's graphlib cost more than a second at 50k nodes (import or run time)."""
    count = len(edges.names)
    succs = [[] for _ in range(count)]
    indegree = [0] * count
    for source, target in zip(edges.sources, edges.targets):
        succs[source].append(target)
        indegree[target] += 1
    order = kahn_order(succs, indegree)
    if len(order) == count:
        return
    # Vertices left over are on a cycle or behind one: walk back through left-over predecessors to the cycle.
    left = set(range(count)).difference(order)
    preds = {}
    for source, target in zip(edges.sources, edges.targets):
        if source in left and target in left:
            preds.setdefault(target, source)
    vertex, seen = min(left), set()
    while vertex not in seen:
        seen.add(vertex)
        vertex = preds[vertex]
    function, name = edges.names[vertex]
    raise InputError(
        f"{where}: a cycle{_in(function)} through node '{name}' "
        f"(only a while loop's NextIteration -> Merge may close one)"
    )


def _check_call_depth(where, calls):
    """The longest chain of nested calls from the main graph (recursion itself is left to the passes)."""
    depth, chain = {}, {}
    for root in calls:
        if root in depth:
            continue
        stack, active = [(root, iter(calls.get(root, ())))], {root}
        while stack:
            function, pending = stack[-1]
            step = next(pending, None)
            if step is not None:
                callee = step[1]
                if callee not in depth and callee not in active and callee in calls:
                    active.add(callee)
                    stack.append((callee, iter(calls[callee])))
                continue
            stack.pop()
            active.discard(function)
            best, via = 0, None
            for node, callee in calls.get(function, ()):
                if callee in depth and depth[callee] + 1 > best:
                    best, via = depth[callee] + 1, (node, callee)
            depth[function], chain[function] = best, via
    if depth.get("", 0) > MAX_CALL_DEPTH or max(depth.values(), default=0) > MAX_CALL_DEPTH:
        start = "" if depth.get("", 0) > MAX_CALL_DEPTH else max(depth, key=depth.get)
        node, callee = chain[start]
        path, fn = [], callee
        while fn is not None and len(path) < 4:
            path.append(fn)
            fn = chain[fn][1] if chain.get(fn) else None
        raise InputError(
            f"{where}: node '{node}'{_in(start)} starts {depth[start]} nested function calls "
            f"({' -> '.join(path)} -> ...); msopt follows at most {MAX_CALL_DEPTH}"
        )
