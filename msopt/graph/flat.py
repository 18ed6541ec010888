"""The flattened run of one signature: the op instances a run executes, function calls inlined once.

``flat_run(view, model, signature)`` is the one inliner: it starts from the signature's outputs
(every main-graph node when the model has no signatures), inlines each function call in place
(one instance per call, no op for the call node, a recursive call left as one opaque op), opens
the functions of functional control flow (If, While, Case, ...) as instances nested in their
node (the node reads its inputs, its functions' arguments read the same inputs, the selector of
an If or Case excepted, and the node is done when its functions are), resolves every data and
control reference across those boundaries (loop back edges dropped), and numbers the instances
in a topological order (TensorFlow's executor's ready order). The cost model, the visualizer
and the rules' walk (msopt.rules.walk, for its argument binding) read this view.
"""

import functools
from itertools import chain, compress, repeat
from operator import attrgetter, itemgetter

import numpy as np

from msopt.errors import InputError
from msopt.graph.op_tables import BACK_EDGE_OPS, CALL_OPS, FIRST_INPUT_IS_PREDICATE, output_index
from msopt.graph.protos import DTYPE_NAMES
from msopt.graph.run_order import renumber
from msopt.graph.tasks import Tasks, op_codes  # Tasks re-exported: the run's container
from msopt.graph.view import MAIN

# A pure function of (op type, port) called once per named edge of every body instance: a few hundred distinct pairs.
_output_index = functools.lru_cache(maxsize=4096)(output_index)


def flat_run(view, model=None, signature=None):
    """(signature name, tasks, {input node name: (dtype, shape)}) of one run of ``signature``."""
    name, roots, feeds = signature_roots(view, model, signature)
    return name, flatten_run(view, roots), feeds


def signature_roots(view, model, signature):
    """(signature name, main-graph node names to run back from, {node name: signature input shape})."""
    sigs = model.signatures if model is not None else {}
    if signature is not None and signature not in sigs:
        raise InputError(f"no signature '{signature}'; available: {', '.join(sorted(sigs)) or 'none'}")
    if not sigs:
        return None, None, {}
    name = signature or ("serving_default" if "serving_default" in sigs else sorted(sigs)[0])
    sig = sigs[name]
    roots = [info.name.split(":")[0].lstrip("^") for info in sig.outputs.values() if info.name]
    feeds = {}
    for info in sig.inputs.values():
        if info.name:
            shape = None if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim]
            feeds[info.name.split(":")[0]] = (DTYPE_NAMES.get(info.dtype, "float"), shape)
    return name, [r for r in roots if r in view.nodes] or None, feeds


def argument_input(call, position):
    """Which of ``call``'s inputs a called function's argument ``position`` reads: an If's or Case's first
    input selects the branch and is no argument."""
    return position + 1 if call.op in FIRST_INPUT_IS_PREDICATE else position


def is_call(view, node):
    """A call (PartitionedCall, a function used as an op): its function runs in its place, it is no op itself."""
    return bool(node.calls) and (node.op in CALL_OPS or node.op in view.functions)


def opened_functions(view, node):
    """The functions ``node`` runs: a call's one function, or every function of a control-flow node."""
    if not node.calls:
        return []
    return node.calls[:1] if is_call(view, node) else list(node.calls)


def flatten_run(view, roots):
    """Inline every function call reached from ``roots`` (all main-graph nodes if None) into tasks."""
    main = view.bodies.get(MAIN, [])  # the main graph has no arguments: its nodes are all real
    if roots is not None:
        needed, stack = set(), list(roots)
        while stack:
            key = stack.pop()
            if key in needed or key not in view.nodes:
                continue
            needed.add(key)
            node = view.nodes[key]
            stack.extend(src for src, _ in node.inputs)
            stack.extend(node.control_inputs)
        main = [n for n in main if n.key in needed]
    builder = _Builder(view)
    builder.instantiate(main, 0, by_place=roots is None and len(main) >= _BY_PLACE)
    return builder.finish()


class _Builder:
    """Creates tasks for one graph or function body per call instance and resolves references across calls.

    Runs of plain ops (no call, no function) are handled as a whole: their tasks in one step, their
    edges as arrays; only references through calls and function arguments are followed one by one.
    """

    def __init__(self, view):
        self.view = view
        self.key, self.op, self.instance, self.node = [], [], [], []  # per task, in creation order
        self.instances = [(None, None)]
        self.index = [{}]  # per instance: node key -> task id, or -1 - (call instance) for a call node (index_of)
        # A main graph numbered by place: its index's (keys, values) in order, for index_of to make, and its task (as
        # index) by place in the graph, -1 for none.
        self.later, self.places, self.starts = [], None, None  # starts: where each node's inputs begin (made once)
        self.segments = []  # (instance, nodes, first task id, place in the main graph if by place): runs of plain nodes
        self.raw = []  # (kind, instance, node, child instance) per opened call ("call") or function ("branch")
        self.exits = {}  # call instance -> tasks its completion means (returns and control returns)
        self.bodies = {}  # function name -> its real nodes
        if view.functions:
            for node in view.nodes.values():
                if node.function != MAIN and node.proto is not None:
                    self.bodies.setdefault(node.function, []).append(node)
        self.active = []  # functions being expanded (a recursive call runs as one opaque op)
        self.branch_of = {}  # instance of a control-flow node's function -> that function's name

    def new_instance(self, call_key, parent):
        self.instances.append((call_key, parent))
        self.index.append({})
        return len(self.instances) - 1

    def index_of(self, instance):
        """``instance``'s index; for the main graph numbered by place made when first asked (every instance is made by
        then), as a graph that reads its edges by place seldom needs it."""
        found = self.index[instance]
        if found is None:
            found = self.index[instance] = {}
            for keys, values in self.later:
                found.update(zip(keys, values))
        return found

    def instantiate(self, nodes, instance, by_place=False):
        """Tasks for ``nodes`` in ``instance``; ``by_place``: the whole main graph, its edges numbered from the view's
        main_input_sources."""
        view = self.view
        if by_place:
            self.places = np.full(len(nodes), -1, np.int64)
            self.index[instance] = None
        # Calls and control flow one by one (arguments, virtual, never reach here: bodies hold real nodes).
        special = list(compress(range(len(nodes)), map(attrgetter("calls"), nodes)))
        start = 0
        for k in special:
            if k > start:
                self.add_ops(nodes[start:k], instance, start if by_place else False)
            start = k + 1
            node = nodes[k]
            if node.proto is None:
                continue
            if is_call(view, node) and node.calls[0] not in self.active:
                child = self.new_instance(node.key, instance)
                if by_place:
                    self.later.append(((node.key,), (-1 - child,)))
                    self.places[k] = -1 - child
                else:
                    self.index[instance][node.key] = -1 - child
                self.active.append(node.calls[0])
                self.instantiate(self.bodies.get(node.calls[0], ()), child)
                self.active.pop()
                self.raw.append(("call", instance, node, child))
                continue
            self.add_ops([node], instance, k if by_place else False)
            if not is_call(view, node):
                self.open_branches(node, instance)
        if start < len(nodes):
            self.add_ops(nodes[start:], instance, start if by_place else False)

    def add_ops(self, nodes, instance, place=False):
        """One task per node of ``nodes`` (plain ops of one instance), numbered next; from ``place`` on in the main
        graph numbered by place (False if not)."""
        first = len(self.key)
        keys = list(map(attrgetter("key"), nodes))
        self.key += keys
        self.op += map(attrgetter("op"), nodes)
        self.instance += [instance] * len(nodes)
        self.node += nodes
        if place is False:
            self.index[instance].update(zip(keys, range(first, first + len(nodes))))
        else:
            self.later.append((keys, range(first, first + len(nodes))))
            self.places[place : place + len(nodes)] = np.arange(first, first + len(nodes))
        self.segments.append((instance, nodes, first, place))

    def open_branches(self, node, instance):
        """Functional control flow (If, While, Case, ...): each function the node runs becomes an instance
        nested in the node, its arguments read the node's inputs (an If's or Case's selector excepted)."""
        for branch in opened_functions(self.view, node):
            if branch in self.active:
                continue
            child = self.new_instance(node.key, instance)
            self.active.append(branch)
            self.instantiate(self.bodies.get(branch, ()), child)
            self.active.pop()
            self.raw.append(("branch", instance, node, child))
            self.branch_of[child] = branch

    def finish(self):
        self.call_inputs = {child: (instance, node) for _, instance, node, child in self.raw}
        n = len(self.key)
        names, codes = self.op_codes = op_codes(self.op)
        back = None
        if not BACK_EDGE_OPS.isdisjoint(names):
            back = np.array([op in BACK_EDGE_OPS for op in names], bool)[codes]
        data, control = [], []
        for instance, nodes, first, place in self.segments:
            data.append(self.data_edges(instance, nodes, first, back, place))
            control.extend(self.control_edges(instance, nodes, first))
        data_dst, data_src, data_port = (np.concatenate([d[k] for d in data] or [_EMPTY]) for k in range(3))
        # Control inputs of a call node hold back the body ops that have no other predecessor.
        held = [(instance, node, child) for _, instance, node, child in self.raw if node.control_inputs]
        if held:
            degree = np.bincount(data_dst, minlength=n) + _bincount_all(control, n)
            by_instance = np.argsort(np.asarray(self.instance, np.int64), kind="stable")
            bounds = np.searchsorted(
                np.asarray(self.instance, np.int64)[by_instance], np.arange(len(self.instances) + 1)
            )
            for instance, node, child in held:
                before = [x for src in node.control_inputs for x in self.done_tasks(instance, src)]
                tasks = by_instance[bounds[child] : bounds[child + 1]]
                tasks = tasks[degree[tasks] == 0]
                if before and len(tasks):
                    control.append((np.repeat(tasks, len(before)), np.tile(np.asarray(before, np.int64), len(tasks))))
        # A control-flow node is done when the functions it runs are: its consumers see them nested in it.
        for kind, instance, node, child in self.raw:
            if kind == "branch":
                owner = self.index_of(instance)[node.key]
                exits = self.instance_exits(child, self.branch_of[child])
                control.append((np.full(len(exits), owner, np.int64), np.asarray(exits, np.int64)))
        control_dst, control_src = (np.concatenate([c[k] for c in control] or [_EMPTY]) for k in range(2))
        tasks = Tasks()
        tasks.instances = self.instances
        return renumber(tasks, self, (data_dst, data_src, data_port), (control_dst, control_src))

    def data_edges(self, instance, nodes, first, back, place=False):
        """(dst, src, port) arrays of the data inputs of the tasks ``first``... made for ``nodes``, in order (from
        ``place`` on in the main graph numbered by place, False if not)."""
        if place is False:
            counts = list(map(len, map(attrgetter("inputs"), nodes)))
            m = sum(counts)
        else:
            starts = self._main_input_starts()[place : place + len(nodes) + 1]
            counts, m = np.diff(starts), int(starts[-1] - starts[0])
        if not m:
            return _EMPTY, _EMPTY, _EMPTY
        pairs = list(chain.from_iterable(map(attrgetter("inputs"), nodes)))
        ports = list(map(itemgetter(1), pairs))
        if place is False:
            found = np.fromiter(map(self.index_of(instance).get, map(itemgetter(0), pairs), repeat(-1, m)), np.int64, m)
        else:  # each source's place in the graph, then its task
            places = np.frombuffer(self.view.main_input_sources, np.int32)[starts[0] : starts[-1]]
            found = np.where(places >= 0, self.places[places], -1)
        dst = np.repeat(np.arange(first, first + len(nodes), dtype=np.int64), counts)
        try:
            port = np.array(ports)
            plain_ports = port.dtype.kind == "i" and port.dtype.itemsize == 8
        except (OverflowError, ValueError):
            plain_ports = False
        if not plain_ports:  # output names in a function body: resolved one by one below
            port = np.fromiter((p if p.__class__ is int and abs(p) < 2**62 else _NAMED for p in ports), np.int64, m)
        slow = (found < 0) | (port == _NAMED)
        if back is not None:
            slow |= back[np.maximum(found, 0)] & (found >= 0)
        keep = np.ones(m, bool)
        nodes_of, ops = self.view.nodes, self.op
        slow = np.flatnonzero(slow)
        dropped, named, named_port, resolved, resolved_task = [], [], [], [], []  # set on the arrays at the end
        for e, f in zip(slow.tolist(), found[slow].tolist()):
            src, p = pairs[e]
            if f >= 0:  # a plain op: only a back edge is dropped, a named output is looked up
                if ops[f] in BACK_EDGE_OPS:
                    dropped.append(e)
                else:
                    named.append(e)
                    named_port.append(p if p.__class__ is int else _output_index(ops[f], p))
                continue
            ref = self.resolve(instance, src, p)
            if ref is None or nodes_of[src].op in BACK_EDGE_OPS:
                dropped.append(e)
            else:
                resolved.append(e)
                resolved_task.append(ref[0])
                named.append(e)
                named_port.append(ref[1])
        keep[dropped] = False
        port[named] = named_port
        found[resolved] = resolved_task
        return dst[keep], found[keep], port[keep]

    def _main_input_starts(self):
        """Per node of the main graph, where its data inputs start in the view's main_input_sources (made once)."""
        if self.starts is None:
            counts = np.fromiter(map(len, map(attrgetter("inputs"), self.view.bodies[MAIN])), np.int64)
            self.starts = np.concatenate(([0], np.cumsum(counts)))
        return self.starts

    def control_edges(self, instance, nodes, first):
        """(dst, src) arrays of the control edges of the tasks ``first``... made for ``nodes``."""
        counts = [len(n.control_inputs) for n in nodes]
        m = sum(counts)
        if not m:
            return []
        sources = [s for n in nodes for s in n.control_inputs]
        found = np.fromiter(map(self.index_of(instance).get, sources, repeat(-1, m)), np.int64, m)
        dst = np.repeat(np.arange(first, first + len(nodes), dtype=np.int64), counts)
        out = [(dst[found >= 0], found[found >= 0])]
        for e in np.flatnonzero(found < -1).tolist():  # a call: its returns and control returns
            exits = self.instance_exits(-1 - int(found[e]), self.view.nodes[sources[e]].calls[0])
            out.append((np.full(len(exits), dst[e], np.int64), np.asarray(exits, np.int64)))
        return out

    def resolve(self, instance, key, port):
        """The (task, output index) a reference to ``key``:``port`` inside ``instance`` reads, or None."""
        view = self.view
        for _ in range(10000):
            node = view.nodes.get(key)
            if node is None:
                return None
            if node.virtual:  # a function argument: what the caller passed
                if instance not in self.call_inputs:
                    return None
                fn = view.functions[node.function]
                instance, call = self.call_inputs[instance]
                position = argument_input(call, fn.args.index(key))
                if position >= len(call.inputs):
                    return None
                key, port = call.inputs[position]
                continue
            found = (self.index[instance] or self.index_of(instance)).get(key)
            if found is None:
                return None
            if found < 0:  # a call: follow the callee's return value
                child = -1 - found
                fn = view.functions[node.calls[0]]
                out_args = [a.name for a in fn.proto.signature.output_arg]
                index = fn.output_index(port)
                name = out_args[index] if index is not None and index < len(out_args) else None
                if name not in fn.returns:
                    return None
                key, port = fn.returns[name]
                instance = child
                continue
            return found, _output_index(node.op, port)
        return None

    def done_tasks(self, instance, key):
        """Tasks whose completion a control edge from ``key`` waits for."""
        found = (self.index[instance] or self.index_of(instance)).get(key)
        if found is None:
            return []
        if found >= 0:
            return [found]
        return self.instance_exits(-1 - found, self.view.nodes[key].calls[0])

    def instance_exits(self, child, function):
        """Tasks whose completion means instance ``child`` of ``function`` is done (returns and control returns)."""
        if child not in self.exits:
            fn = self.view.functions[function]
            exits = []
            for src, port in fn.returns.values():
                ref = self.resolve(child, src, port)
                if ref is not None:
                    exits.append(ref[0])
            for name in fn.proto.control_ret.values():
                exits.extend(self.done_tasks(child, f"{fn.name}:{name}"))
            self.exits[child] = exits
        return self.exits[child]


_EMPTY = np.zeros(0, np.int64)
# A main graph this big numbers its edges by place (the view's main_input_sources). Function bodies, and smaller graphs,
# look their sources up by key: a body reads its arguments through resolve, which needs the key -> task dict anyway,
# and for a small body a few numpy calls per instance cost more than the lookups (bench/RESULTS.md has the figures).
_BY_PLACE = 4096
_NAMED = -(2**62)  # a port given by name (resolved one by one)


def _bincount_all(pairs, n):
    """Per task, how many of the (dst, src) edge arrays ``pairs`` end at it."""
    counts = np.zeros(n, np.int64)
    for dst, _ in pairs:
        counts += np.bincount(dst, minlength=n)
    return counts
