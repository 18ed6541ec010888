"""Which nodes must share a stream: the linkers, and the groups their links join for a plan's scope.

Each linker yields (a, b) pairs of node keys that TensorFlow needs on one stream, from the real
nodes of whole function bodies (``LINKERS``, in the order their links join):

- colocation_links: nodes of one colocation group (``_class: loc:@x``);
- resource_links: a resource or reference and every op consuming it, followed through function
  calls into their bodies (TF2 captured variables);
- frame_links: every node of a TF1 control-flow frame (Enter ... Exit);
- fusion_links: a group TensorFlow fuses into one kernel (grappler's remapper, oneDNN's layout
  pass) or regroups only on one device (the arithmetic optimizer's Add trees): split, the fused
  node runs on one device whatever its parts said, or the group runs unfused with other rounding
  (msopt.planning.fusion has the patterns);
- the XLA linkers (msopt.planning.xla_clusters): the nodes of one XLA cluster.

``view_constraints(view, scope)`` joins them into groups (msopt.planning.link_groups) with the host-only
nodes (msopt.graph.host_only) left out, linking only the bodies a group reaching ``scope`` enters.
Functional control flow (While, If, Case and their Stateless forms) needs no linker: the call is
one node and its body functions are partitioned like any other function.
"""

import weakref
from collections import defaultdict

from msopt.graph.host_only import host_only
from msopt.graph.op_tables import CALL_OPS
from msopt.graph.view import DT_RESOURCE, REF_OFFSET, node_key, reach
from msopt.planning.fusion import fusion_groups
from msopt.planning.link_groups import link_groups
from msopt.planning.xla_clusters import XLA_LINKERS

# fmt: off
RESOURCE_PRODUCERS = frozenset({
    "VarHandleOp", "_VarHandlesOp", "VariableV2", "Variable", "TemporaryVariable",
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensors",
    "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2",
})
PASS_THROUGH_OPS = frozenset({
    "Identity", "IdentityN", "RefIdentity", "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch",
    "Merge", "RefMerge", "NextIteration", "RefNextIteration",
})
IF_OPS = frozenset({"If", "StatelessIf"})
WHILE_OPS = frozenset({"While", "StatelessWhile"})
CASE_OPS = frozenset({"Case", "StatelessCase"})
# fmt: on
LOOP_ENTRY, LOOP_EXIT = frozenset({"Enter", "RefEnter"}), frozenset({"Exit", "RefExit"})

_BY_VIEW = weakref.WeakKeyDictionary()  # view -> what its constraints need, worked out on demand (the view alone)


def _cache(view):
    cache = _BY_VIEW.get(view)
    if cache is None or cache["size"] != len(view.nodes):
        cache = _BY_VIEW[view] = {"size": len(view.nodes), "host": None, "links": {}, "groups": {}, "callers": None}
    return cache


def host_keys(view):
    """The keys of the view's host-only nodes (msopt.graph.host_only.host_only), found once per view."""
    cache = _cache(view)
    if cache["host"] is None:
        cache["host"] = host_only(view)
    return cache["host"]


def view_constraints(view, scope=None):
    """(host-only keys, [(linked keys, kinds)]): those of ``view`` in ``scope``, and every linked group with a node in it
    (None: every group), as the links of the whole view make it, in the order its first node was linked. A group
    lists only nodes with a NodeDef (function arguments link nodes but are never assigned).

    Every link lies inside one function body or runs from a node of a body into the bodies it calls, and each linker
    yields its links body by body in the view's order. So only the bodies a group reaching ``scope`` enters, with
    every body calling them, are linked (each once per view): their links are those of the whole view, in its order,
    less the groups that never reach ``scope``."""
    cache = _cache(view)
    if scope in cache["groups"]:
        return cache["groups"][scope]
    everywhere = host_keys(view)  # host-only nodes link to nothing: they keep their device
    if cache["callers"] is None:
        cache["callers"] = _Callers(view)
    bodies, callers, nodes = view.bodies, cache["callers"], view.nodes
    whole = scope is None or len(bodies) == 1  # one body (no library): every group is in it, none grows
    active = set(bodies) if whole else reach(_functions_of(scope), callers)
    while True:
        found = link_groups(_links(view, cache["links"], [f for f in bodies if f in active], bodies, everywhere))
        if scope is not None:
            found = [group for group in found if not scope.isdisjoint(group[0])]
            grown = set() if whole else {nodes[k].function for keys, _ in found for k in keys}
            if not grown <= active:
                active = reach(active | grown, callers)
                continue
        break
    if view.functions:  # function arguments (no NodeDef) may be linked: left out of the groups
        groups = [(real, kinds) for keys, kinds in found if (real := [k for k in keys if nodes[k].proto is not None])]
    else:  # no library: every node is real
        groups = found
    host = set(everywhere) if scope is None else {k for k in everywhere if k in scope}
    cache["groups"] = {scope: (host, groups)}  # the last scope only: the auto search asks for one
    return host, groups


class _Callers(dict):
    """{function: the functions calling it}, each made when first asked: a body joins with every body calling it
    (a call links the nodes of the body it calls, msopt.graph.view.reach closes over it)."""

    def __init__(self, view):
        super().__init__()
        self.view = view

    def get(self, name, default=None):
        if name in self:
            return self[name]
        info = self.view.functions.get(name)
        found = self[name] = {self.view.nodes[key].function for key in info.callers} if info is not None else set()
        return found


def _functions_of(scope):
    """The functions of the keys of ``scope``, read from the keys themselves (``function:name``; node names hold no
    ':'), not looked up node by node."""
    return {key.rpartition(":")[0] for key in scope}


def _links(view, done, functions, bodies, host):
    """The links of ``functions`` (in the view's order), linker by linker: each link belongs to the body of its first
    node, and each body is linked once per view (``done``: function -> its links, one list per linker)."""
    todo = [f for f in functions if f not in done]
    if todo:
        found = {f: tuple([] for _ in LINKERS) for f in todo}
        members = [node for f in todo for node in bodies[f]]
        nodes = view.nodes
        for index, (kind, linker) in enumerate(LINKERS):
            links = ((a, b) for a, b in linker(view, members) if a not in host and b not in host)
            if len(todo) == 1:  # one body (a graph without a library): every link is its own
                found[todo[0]][index].extend((a, b, kind) for a, b in links)
                continue
            for a, b in links:
                found[nodes[a].function][index].append((a, b, kind))
        done.update(found)
    return [link for index in range(len(LINKERS)) for f in functions for link in done[f][index]]


def colocation_links(view, nodes):
    """Members of one colocation group (``_class: loc:@name``) with the group's named node (of ``nodes``: real
    nodes of whole bodies, in the view's order)."""
    for node in view.with_attr(nodes, "_class"):
        for entry in node.proto.attr["_class"].list.s:
            entry = entry.decode(errors="replace")
            if entry.startswith("loc:@"):
                other = node_key(node.function, entry[len("loc:@") :])
                if other in view.nodes and other != node.key:
                    yield node.key, other


def resource_links(view, nodes):
    """A resource or reference producer with each consumer, through calls into function bodies (the consumers
    among ``nodes``: real nodes of whole bodies, in the view's order)."""
    carriers = resource_carriers(view, nodes)
    readers = {key for carrier in carriers for key in view.nodes[carrier].outputs}  # data or control consumers
    for node in nodes if readers else ():  # in the view's order
        if node.key not in readers:
            continue
        callees = callee_arguments(view, node)
        for index, (src, _) in enumerate(node.inputs):
            if src not in carriers:
                continue
            if callees is None:
                yield src, node.key
                continue
            for function, offset in callees:  # a call: the body's argument joins, not the call
                args = view.functions[function].args
                if 0 <= index - offset < len(args):
                    yield src, args[index - offset]


def resource_carriers(view, nodes):
    """Keys of nodes whose output is a resource handle or a reference (of the bodies of ``nodes``: real nodes of whole
    bodies)."""
    carriers = set()
    bodies = dict.fromkeys(node.function for node in nodes)  # a body without real nodes reads nothing
    for name in bodies:
        info = view.functions.get(name)
        if info is not None:
            carriers.update(info.handle_args)
    for node in view.of_ops(_may_carry):  # the view's nodes of these op types (one test per op type)
        if node.function not in bodies:
            continue
        if node.op in RESOURCE_PRODUCERS:
            carriers.add(node.key)
        else:  # a Placeholder
            dtype = node.proto.attr["dtype"].type if "dtype" in node.proto.attr else 0
            if dtype == DT_RESOURCE or dtype > REF_OFFSET:
                carriers.add(node.key)
    frontier = list(carriers)
    while frontier:  # resources flow on through Identity, Enter, Switch, Merge, ...
        key = frontier.pop()
        for consumer in view.nodes[key].outputs:
            node = view.nodes[consumer]
            if _passes_handle(node) and consumer not in carriers and any(s == key for s, _ in node.inputs):
                carriers.add(consumer)
                frontier.append(consumer)
    return carriers


def _may_carry(op):
    return op in RESOURCE_PRODUCERS or op == "Placeholder"


def _passes_handle(node):
    """A pass-through op forwarding a handle: a Ref* op or one typed DT_RESOURCE (Identity of a ref reads it)."""
    if node.op not in PASS_THROUGH_OPS:
        return False
    if node.op.startswith("Ref"):
        return True
    attr = node.proto.attr
    return "T" in attr and (attr["T"].type == DT_RESOURCE or DT_RESOURCE in attr["T"].list.type)


def callee_arguments(view, node):
    """[(function, offset)]: data input i of a call node is argument i - offset; None if not a call."""
    op = node.op
    if op in view.functions:
        return [(op, 0)]
    if op in CALL_OPS:  # the attribute map is read for calls only (most readers are none)
        names, offset = [node.proto.attr["f"].func.name], 0
    elif op in WHILE_OPS:
        attrs = node.proto.attr
        names, offset = [attrs["cond"].func.name, attrs["body"].func.name], 0
    elif op in IF_OPS:
        attrs = node.proto.attr
        names, offset = [attrs["then_branch"].func.name, attrs["else_branch"].func.name], 1
    elif op in CASE_OPS:
        names, offset = [f.name for f in node.proto.attr["branches"].list.func], 1
    else:
        return None
    return [(name, offset) for name in names if name in view.functions]


def frame_links(view, nodes):
    """Every node reached from a TF1 loop's Enter nodes before the matching Exit, with one Enter of that frame
    (the frames of ``nodes``: real nodes of whole bodies)."""
    frames = defaultdict(list)  # (function, frame_name) -> Enter keys
    for node in nodes:
        if node.op in LOOP_ENTRY:
            frames[node.function, node.proto.attr["frame_name"].s].append(node.key)
    for enters in frames.values():
        first = enters[0]
        seen = set(enters)
        for key in enters[1:]:
            yield first, key
        stack = [(key, 1) for key in enters]
        while stack:
            key, depth = stack.pop()
            for consumer in view.nodes[key].outputs:
                if consumer in seen:
                    continue
                seen.add(consumer)
                yield first, consumer
                op = view.nodes[consumer].op
                inner = depth + (op in LOOP_ENTRY) - (op in LOOP_EXIT)
                if inner > 0:
                    stack.append((consumer, inner))


def fusion_links(view, nodes):
    """Each group TensorFlow fuses into one kernel or regroups on one device (msopt.planning.fusion) rooted at ``nodes``
    (real nodes of whole bodies), linked."""
    for _, members in fusion_groups(view, nodes):
        for other in members[1:]:
            yield members[0], other


# Every linker, in the order its links join: (kind, linker(view, nodes)), each yielding its links body by body.
LINKERS = (
    ("colocation", colocation_links),
    ("resource", resource_links),
    ("frame", frame_links),
    ("fusion", fusion_links),
    *(("xla", linker) for linker in XLA_LINKERS),
)
