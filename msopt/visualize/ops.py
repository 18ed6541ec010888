"""The ops one signature runs, function calls opened: a called body is inlined under its call's scope."""
import heapq
from collections import defaultdict

from msopt.errors import InputError
from msopt.graph import MAIN

CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
BOOKKEEPING_OPS = {"VarHandleOp"}  # TF2 main graph: variable handles fed to the signature's call
PLUMBING_OPS = {"Identity", "NoOp"}  # at the top of a function body: its outputs and automatic control dependencies
RETURNS_SCOPE = "(returns)"  # the scope they are folded into
INPUTS_SCOPE = "(inputs)"  # top-level placeholders, when there are more than GROUPED_INPUTS
GROUPED_INPUTS = 4


class Op:
    __slots__ = ("key", "path", "op", "callers")

    def __init__(self, key, path, op, callers):
        self.key = key  # node key in the graph view (several Ops share a key when a function is called twice)
        self.path = path  # scope names, then the op's own name
        self.op = op
        self.callers = callers  # keys of the call nodes this op's body was inlined for, outermost first


def op_streams(ops, partition):
    """Each op's stream: its own entry, else its innermost caller's, else 0 (as the simulator and TensorFlow place it)."""
    streams = []
    for op in ops:
        stream = partition.get(op.key)
        if stream is None:
            stream = next((partition[c] for c in reversed(op.callers) if c in partition), 0)
        streams.append(stream)
    return streams


def signature_ops(model, view, signature=None):
    """(ops, edges, signature name): the ops one signature runs, function calls opened.

    edges are (source op index, destination op index, is_control). A model without signatures
    shows its whole main graph. TF2's variable handles in the main graph are left out.
    """
    sigs = model.signatures
    name = None
    if signature is not None:
        if signature not in sigs:
            raise InputError(f"no signature '{signature}'; the model has: {', '.join(sorted(sigs)) or 'none'}")
        name = signature
    elif sigs:
        name = "serving_default" if "serving_default" in sigs else sorted(sigs)[0]
    if name is None:
        keep = None
    else:
        outputs = [t.name.split(":")[0].lstrip("^") for t in sigs[name].outputs.values() if t.name]
        keep = _ancestors(view, [o for o in outputs if o in view.nodes])
        if model.is_tf2:
            keep = {k for k in keep if view.nodes[k].op not in BOOKKEEPING_OPS}
    flat = _Flattener(view)
    flat.body(MAIN, (), keep, [], ())
    inputs = [op for op in flat.ops if op.op == "Placeholder" and len(op.path) == 1]
    if len(inputs) > GROUPED_INPUTS:
        for op in inputs:
            op.path = (INPUTS_SCOPE,) + op.path
    return flat.ops, flat.edges, name


def _ancestors(view, roots):
    seen = set(roots)
    stack = list(roots)
    while stack:
        node = view.nodes[stack.pop()]
        for src in [s for s, _ in node.inputs] + node.control_inputs:
            if src not in seen:
                seen.add(src)
                stack.append(src)
    return seen


class _Flattener:
    """Inlines function bodies into one list of ops; producers of a call's outputs resolve through its body."""

    def __init__(self, view):
        self.view = view
        self.ops = []
        self.edges = []
        self.members = defaultdict(list)
        for node in view.nodes.values():
            if node.proto is not None:
                self.members[node.function].append(node)
        self.active = set()  # functions being inlined (guards against recursion)

    def body(self, function, prefix, keep, arg_sources, callers):
        """Add one graph's ops under scope ``prefix``; return the producers of each of its outputs."""
        view = self.view
        nodes = [n for n in self.members[function] if keep is None or n.key in keep]
        produced = {}  # key -> [op index] for an op, ("call", [[op index] per output], callee) for a call
        if function != MAIN:
            for i, key in enumerate(view.functions[function].args):
                produced[key] = arg_sources[i] if i < len(arg_sources) else []
        self.active.add(function)
        placed = []
        for node in _topological(nodes):
            callee = self._callee(node)
            if callee is not None and callee not in self.active:
                sources = [self._resolve(produced, src, port) for src, port in node.inputs]
                scope = tuple(node.scope.split("/")) if node.scope else ()
                produced[node.key] = ("call", self.body(callee, prefix + scope, None, sources, callers + (node.key,)), callee)
                continue
            index = len(self.ops)
            path = tuple(node.name.split("/"))
            if function != MAIN and len(path) == 1 and node.op in PLUMBING_OPS:
                path = (RETURNS_SCOPE,) + path
            self.ops.append(Op(node.key, prefix + path, node.op, callers))
            produced[node.key] = [index]
            placed.append((node, index))
            for branch in node.calls:  # functional control flow (If, While, Case ...): bodies inside the node
                if branch not in self.active:
                    nargs = len(view.functions[branch].args)
                    self.body(branch, prefix + tuple(node.name.split("/")) + (branch,), None, [[index]] * nargs,
                              callers + (node.key,))
        for node, index in placed:
            for src, port in node.inputs:
                self.edges.extend((s, index, False) for s in self._resolve(produced, src, port))
            if self.ops[index].path[-2:-1] == (RETURNS_SCOPE,) and node.op == "NoOp":
                continue  # a body's automatic control dependencies on all its stateful ops
            for src in node.control_inputs:
                self.edges.extend((s, index, True) for s in self._resolve(produced, src, None))
        self.active.discard(function)
        if function == MAIN:
            return []
        info = view.functions[function]
        out_names = [a.name for a in info.proto.signature.output_arg]
        return [self._resolve(produced, *info.returns[n]) if n in info.returns else [] for n in out_names]

    def _callee(self, node):
        if node.op in self.view.functions:
            return node.op
        if node.op in CALL_OPS and node.calls:
            name = node.proto.attr["f"].func.name if "f" in node.proto.attr else node.calls[0]
            return name if name in self.view.functions else None
        return None

    def _resolve(self, produced, src, port):
        entry = produced.get(src)
        if entry is None:
            return []
        if isinstance(entry, list):
            return entry
        _, outputs, callee = entry
        index = self.view.functions[callee].output_index(port)
        if index is None or index >= len(outputs):
            return [i for out in outputs for i in out]
        return outputs[index]


def _topological(nodes):
    """Nodes in data-flow order (Kahn's, ties by original order); nodes on cycles follow in original order."""
    position = {n.key: i for i, n in enumerate(nodes)}
    indegree = [0] * len(nodes)
    consumers = defaultdict(list)
    for i, n in enumerate(nodes):
        for src in {s for s, _ in n.inputs} | set(n.control_inputs):
            if src in position:
                indegree[i] += 1
                consumers[position[src]].append(i)
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in consumers[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(nodes):
        seen = set(order)
        order.extend(i for i in range(len(nodes)) if i not in seen)
    return [nodes[i] for i in order]
