"""Graph walks shared by the automatic rules: one flat DAG over the main graph and every function body.

A TF2 model computes inside function bodies, so the rules schedule a flat DAG in which each
call's body is expanded in place: a virtual *start* vertex waits for the call's inputs, the
body's roots wait for the start, a body node reading argument i waits for the caller's input
i, and the call node itself waits for the body's returns (so its consumers see the body as
nested inside the call's time span). Loop back edges (NextIteration -> Merge) are dropped.
Memory and time are linear in vertices plus edges; no reachability matrix is ever built.

The rules plan every node of the model, so this DAG is wider than one signature's run
(msopt.flat): it also holds main-graph nodes no signature reaches and functions nobody calls.
A node opens the functions the run opens (``msopt.flat.opened_functions``), a body's arguments
bind to the caller's inputs as in the run (``msopt.flat.argument_input``), and each vertex
records the call nodes it was expanded for, so the instances a run executes are vertices here
with the same identity (key and callers).
"""

import weakref
from collections import defaultdict

from msopt.flat import argument_input, opened_functions
from msopt.gc_pause import gc_paused
from msopt.graph import MAIN
from msopt.op_tables import BACK_EDGE_OPS, FREE_OPS
from msopt.order import longest_to_sink as _longest_to_sink
from msopt.order import topological_order as _topological_order

EXPANSION_FACTOR = 4  # beyond this many vertices per view node, repeated calls share one body


class Dag:
    """Vertices (view node keys, or None for virtual start vertices), edges both ways, a topological order."""

    def __init__(self):
        self.keys = []  # vertex -> view node key (None: a call's virtual start)
        self.preds = []  # vertex -> [vertex]
        self.succs = []  # vertex -> [vertex]
        self.first = {}  # view node key -> its first vertex (the one whose stream the partition keeps)
        self.order = []  # topological order of all vertices
        self.callers = []  # vertex -> keys of the call nodes its body was expanded for, outermost first

    def __len__(self):
        return len(self.keys)

    def add(self, key, callers=()):
        vertex = len(self.keys)
        self.keys.append(key)
        self.callers.append(callers)
        self.preds.append([])
        self.succs.append([])
        if key is not None and key not in self.first:
            self.first[key] = vertex
        return vertex

    def link(self, src, dst):
        self.preds[dst].append(src)
        self.succs[src].append(dst)

    def edge_count(self):
        return sum(len(p) for p in self.preds)

    def partition(self, stream_of, view):
        """{node key: stream} from a per-vertex stream list; virtual nodes are left out."""
        nodes = view.nodes
        return {key: stream_of[v] for key, v in self.first.items() if nodes[key].proto is not None}


_BY_VIEW = weakref.WeakKeyDictionary()  # view -> (node count, its flat DAG): the rules only read the DAG


def flatten(view):
    """The flat DAG of ``view`` (see the module docstring), built once per view: the auto search runs
    several rules over the same view, and none of them changes the DAG."""
    cached = _BY_VIEW.get(view)
    if cached is not None and cached[0] == len(view.nodes):
        return cached[1]
    with gc_paused():
        dag = _flatten(view)
    _BY_VIEW[view] = (len(view.nodes), dag)
    return dag


def _flatten(view):
    dag = Dag()
    by_function = defaultdict(list)
    for node in view.nodes.values():
        if node.proto is not None:
            by_function[node.function].append(node)
    budget = EXPANSION_FACTOR * len(view.nodes) + 1000
    expanded = {}  # function -> returns of its first instance ({output name: vertex})
    _expand(view, dag, by_function, MAIN, {}, None, expanded, budget, [], ())
    for name, _info in view.functions.items():  # bodies nobody calls from the main graph still get a plan
        if name not in expanded:
            _expand(view, dag, by_function, name, {}, None, expanded, budget, [name], ())
    dag.order = topological_order(dag)
    return dag


def _expand(view, dag, by_function, function, arg_source, start, expanded, budget, stack, callers):
    """Add one instance of ``function``'s body; returns {return name: vertex or None}."""
    nodes = view.nodes
    body = by_function.get(function, ())
    local = {node.key: dag.add(node.key, callers) for node in body}

    def resolve(key):
        if key in local:
            return local[key]
        return arg_source.get(key)  # a function argument: the caller's vertex (None at a root)

    for node in body:
        v = local[node.key]
        has_pred = False
        for src, _ in node.inputs:
            u = resolve(src)
            if u is not None and nodes[src].op not in BACK_EDGE_OPS:
                dag.link(u, v)
                has_pred = True
        for src in node.control_inputs:
            u = resolve(src)
            if u is not None:
                dag.link(u, v)
                has_pred = True
        if not has_pred and start is not None:
            dag.link(start, v)
    for node in body:
        for callee in sorted(set(opened_functions(view, node))):  # a stable order, whatever the view's
            _expand_call(
                view,
                dag,
                by_function,
                node,
                callee,
                local[node.key],
                resolve,
                expanded,
                budget,
                stack,
                callers + (node.key,),
            )
    info = view.functions.get(function)
    if info is None:
        return {}
    return {name: resolve(src) for name, (src, _) in sorted(info.returns.items())}


def _expand_call(view, dag, by_function, node, callee, call_vertex, resolve, expanded, budget, stack, callers):
    """Expand ``callee`` inside the call ``node``: inputs -> start -> body -> returns -> call."""
    info = view.functions.get(callee)
    if info is None or callee in stack:
        return
    if callee in expanded and len(dag) > budget:  # too big to copy again: wait on the first instance
        returns = expanded[callee].values()
    else:
        start = dag.add(None, callers)
        for u in dag.preds[call_vertex]:
            dag.link(u, start)
        arg_source = {}
        for i, arg in enumerate(info.args):
            j = argument_input(node, i)
            arg_source[arg] = resolve(node.inputs[j][0]) if j < len(node.inputs) else start
            if arg_source[arg] is None:
                arg_source[arg] = start
        returns = _expand(
            view, dag, by_function, callee, arg_source, start, expanded, budget, stack + [callee], callers
        )
        expanded.setdefault(callee, returns)
        returns = returns.values()
    for u in set(returns):
        if u is not None and u != call_vertex:
            dag.link(u, call_vertex)


def topological_order(dag):
    """Kahn's order (msopt.order); vertices left on a cycle are released earliest first (their cycle edge ignored)."""
    return _topological_order(dag.succs, [len(p) for p in dag.preds])


def earliest_times(dag, cost):
    """(start, finish) per vertex with unlimited streams and free syncs: the ASAP schedule."""
    start = [0.0] * len(dag)
    finish = [0.0] * len(dag)
    preds = dag.preds
    for v in dag.order:
        s = 0.0
        for u in preds[v]:
            if finish[u] > s:
                s = finish[u]
        start[v] = s
        finish[v] = s + cost[v]
    return start, finish


def longest_to_sink(dag, cost):
    """Per vertex, the longest cost path from it to any sink (its own cost included): the list priority."""
    return _longest_to_sink(dag.order, dag.succs, cost)


def vertex_costs(view, dag, options):
    """Per-vertex time: options.node_costs ({key: time}, the plan layer passes the cost model's) if given,
    else one unit per kernel."""
    given = options.node_costs
    nodes = view.nodes
    if given is not None:
        return [given.get(key, 0.0) if key is not None else 0.0 for key in dag.keys]
    return [unit_cost(nodes[key]) if key is not None else 0.0 for key in dag.keys]


def unit_cost(node):
    """Topology-only work: one unit per op that launches a kernel, nothing for bookkeeping ops and calls."""
    return 0.0 if node.op in FREE_OPS or node.calls else 1.0
