"""The ops one signature runs, as the flattened run lists them, each under a scope path for drawing."""

from msopt.errors import InputError
from msopt.graph.flat import flat_run, is_call
from msopt.graph.op_tables import HIDDEN_IN_DRAWING
from msopt.graph.view import MAIN

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
    """(ops, edges, signature name): the op instances of the flattened run of one signature (msopt.graph.flat).

    edges are (source op index, destination op index, is_control). A model without signatures
    shows its whole main graph. TF2's variable handles in the main graph are not drawn. A called
    body is drawn under its call node's scope, a control-flow node's functions under the node.
    """
    sigs = model.signatures
    if signature is not None and signature not in sigs:
        raise InputError(f"no signature '{signature}'; the model has: {', '.join(sorted(sigs)) or 'none'}")
    name, tasks, _ = flat_run(view, model, signature)
    hidden = HIDDEN_IN_DRAWING if model.is_tf2 else frozenset()
    prefixes = {0: ()}
    ops, index = [], {}
    for i, key in enumerate(tasks.key):
        node = view.nodes[key]
        if node.function == MAIN and node.op in hidden:
            continue
        instance = tasks.instance[i]
        prefix = _prefix(view, tasks, instance, node.function, prefixes)
        path = tuple(node.name.split("/"))
        if node.function != MAIN and len(path) == 1 and node.op in PLUMBING_OPS:
            path = (RETURNS_SCOPE,) + path
        index[i] = len(ops)
        ops.append(Op(key, prefix + path, node.op, tasks.callers(i)))
    edges = []
    for i, j in index.items():
        for src, _ in tasks.inputs[i]:
            if src in index:
                edges.append((index[src], j, False))
        if ops[j].path[-2:-1] == (RETURNS_SCOPE,) and ops[j].op == "NoOp":
            continue  # a body's automatic control dependencies on all its stateful ops
        edges.extend((index[src], j, True) for src in tasks.control[i] if src in index)
    inputs = [op for op in ops if op.op == "Placeholder" and len(op.path) == 1]
    if len(inputs) > GROUPED_INPUTS:
        for op in inputs:
            op.path = (INPUTS_SCOPE,) + op.path
    return ops, edges, name


def _prefix(view, tasks, instance, function, prefixes):
    """Scope path of an instance: a call's body under the call's scope, a control-flow function under its node."""
    if instance in prefixes:
        return prefixes[instance]
    call_key, parent = tasks.instances[instance]
    call = view.nodes[call_key]
    above = _prefix(view, tasks, parent, call.function, prefixes)
    if is_call(view, call):
        prefix = above + (tuple(call.scope.split("/")) if call.scope else ())
    else:
        prefix = above + tuple(call.name.split("/")) + (function,)
    prefixes[instance] = prefix
    return prefix
