"""Reference flattening: the per-node builder and renumbering as they were before the array version (for tests).

Kept out of the package: tests compare msopt.graph.flat's tasks with these, list for list.
"""

from msopt.graph.flat import argument_input, is_call, opened_functions, signature_roots
from msopt.graph.op_tables import BACK_EDGE_OPS
from msopt.graph.op_tables import output_index as _output_index
from msopt.graph.order import topological_order
from msopt.graph.view import MAIN


class Tasks:
    """The flattened run: parallel lists indexed by task id, ids in a topological order."""

    def __init__(self):
        self.key = []
        self.op = []
        self.instance = []
        self.inputs = []
        self.control = []
        self.instances = [(None, None)]


def flat_run(view, model=None, signature=None):
    """(signature name, tasks, {input node name: (dtype, shape)}) of one run of ``signature``."""
    name, roots, feeds = signature_roots(view, model, signature)
    return name, flatten_run(view, roots), feeds


def flatten_run(view, roots):
    """Inline every function call reached from ``roots`` (all main-graph nodes if None) into tasks."""
    main = [n for n in view.nodes.values() if n.function == MAIN]
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
    builder.instantiate(main, 0)
    return builder.finish()


class _Builder:
    """Creates tasks for one graph or function body per call instance and resolves references across calls."""

    def __init__(self, view):
        self.view = view
        self.tasks = Tasks()
        self.index = {}  # (instance, key) -> task id, or ("call", instance id) for a call node
        self.raw = []  # per task: (instance, node) to resolve after all tasks exist
        self.exits = {}  # call instance -> tasks its completion means (returns and control returns)
        self.bodies = {}  # function name -> its real nodes
        for node in view.nodes.values():
            if node.function != MAIN and not node.virtual:
                self.bodies.setdefault(node.function, []).append(node)
        self.active = []  # functions being expanded (a recursive call runs as one opaque op)
        self.branch_of = {}  # instance of a control-flow node's function -> that function's name

    def instantiate(self, nodes, instance):
        view, t = self.view, self.tasks
        for node in nodes:
            if node.virtual:
                continue
            if is_call(view, node) and node.calls[0] not in self.active:
                child = len(t.instances)
                t.instances.append((node.key, instance))
                self.index[(instance, node.key)] = ("call", child)
                self.active.append(node.calls[0])
                self.instantiate(self.bodies.get(node.calls[0], ()), child)
                self.active.pop()
                self.raw.append(("call", instance, node, child))
                continue
            self.index[(instance, node.key)] = len(t.key)
            t.key.append(node.key)
            t.op.append(node.op)
            t.instance.append(instance)
            t.inputs.append([])
            t.control.append([])
            self.raw.append(("op", instance, node, len(t.key) - 1))
            if node.calls and not is_call(view, node):
                self.open_branches(node, instance)

    def open_branches(self, node, instance):
        """Functional control flow (If, While, Case, ...): each function the node runs becomes an instance
        nested in the node, its arguments read the node's inputs (an If's or Case's selector excepted)."""
        t = self.tasks
        for branch in opened_functions(self.view, node):
            if branch in self.active:
                continue
            child = len(t.instances)
            t.instances.append((node.key, instance))
            self.active.append(branch)
            self.instantiate(self.bodies.get(branch, ()), child)
            self.active.pop()
            self.raw.append(("branch", instance, node, child))
            self.branch_of[child] = branch

    def finish(self):
        view, t = self.view, self.tasks
        self.call_inputs = {}  # call instance -> resolved data input refs (for its body's _Arg nodes)
        for kind, instance, node, target in self.raw:
            if kind != "op":
                self.call_inputs[target] = (instance, node)
        index, nodes = self.index, view.nodes
        for kind, instance, node, target in self.raw:
            if kind != "op":
                continue
            inputs = t.inputs[target]
            for src, port in node.inputs:
                found = index.get((instance, src))
                if found.__class__ is int:  # the common case: a plain op of the same graph or body
                    src_op = nodes[src].op
                    if src_op not in BACK_EDGE_OPS:
                        inputs.append((found, port if port.__class__ is int else _output_index(src_op, port)))
                    continue
                ref = self.resolve(instance, src, port)
                if ref is not None and nodes[src].op not in BACK_EDGE_OPS:
                    inputs.append(ref)
            for src in node.control_inputs:
                t.control[target].extend(self.done_tasks(instance, src))
        # Control inputs of a call node hold back the body ops that have no other predecessor.
        held = [
            (instance, node, child) for kind, instance, node, child in self.raw if kind != "op" and node.control_inputs
        ]
        if held:
            by_instance = {}
            for i, inst in enumerate(t.instance):
                by_instance.setdefault(inst, []).append(i)
            for instance, node, child in held:
                before = [x for src in node.control_inputs for x in self.done_tasks(instance, src)]
                for i in by_instance.get(child, ()):
                    if not t.inputs[i] and not t.control[i]:
                        t.control[i].extend(before)
        # A control-flow node is done when the functions it runs are: its consumers see them nested in it.
        for kind, instance, node, child in self.raw:
            if kind == "branch":
                owner = index[(instance, node.key)]
                t.control[owner].extend(self.instance_exits(child, self.branch_of[child]))
        return _topological(t)

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
            found = self.index.get((instance, key))
            if found is None:
                return None
            if isinstance(found, tuple):  # a call: follow the callee's return value
                child = found[1]
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
        found = self.index.get((instance, key))
        if found is None:
            return []
        if not isinstance(found, tuple):
            return [found]
        child = found[1]
        return self.instance_exits(child, self.view.nodes[key].calls[0])

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


def _topological(t):
    """Renumber tasks in the order TensorFlow's executor would find them ready (FIFO over ready ops)."""
    n = len(t.key)
    succ = [[] for _ in range(n)]
    pending = [0] * n
    for i in range(n):
        inputs, control = t.inputs[i], t.control[i]
        if len(inputs) + len(control) == 1:
            preds = [inputs[0][0]] if inputs else control
        else:
            preds = {src for src, _ in inputs}
            preds.update(control)
        if i in preds:
            preds = [p for p in preds if p != i]
        pending[i] = len(preds)
        for p in preds:
            succ[p].append(i)
    order = topological_order(succ, pending)
    new = [0] * n
    for position, i in enumerate(order):
        new[i] = position
    out = Tasks()
    out.instances = t.instances
    for i in order:
        out.key.append(t.key[i])
        out.op.append(t.op[i])
        out.instance.append(t.instance[i])
        # Drop edges that would point backwards (only left by a cycle) so that every edge goes forward.
        out.inputs.append([(new[s], p) for s, p in t.inputs[i] if new[s] < new[i]])
        out.control.append(sorted({new[s] for s in t.control[i] if new[s] < new[i]}))
    return out
