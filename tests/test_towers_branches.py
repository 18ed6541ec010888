"""Policy towers' identical branches (compiled signatures) against a straightforward reference on random graphs."""

import random
from collections import Counter, defaultdict

import pytest
from random_graphs import random_graph

from msopt.graph import protos
from msopt.graph.flat import flatten_run
from msopt.graph.op_tables import FREE_OPS
from msopt.graph.view import GraphView
from msopt.rules.towers import identical_branches
from msopt.rules.walk import dag_of


def reference_branches(view, dag):
    """The branches as the first version found them: a Python hash of (op, the inputs' signatures) per op."""
    nodes = view.nodes
    signature = [0] * len(dag)
    for v in dag.order:
        signature[v] = hash((dag.ops[v], tuple(signature[u] for u in dag.preds[v])))
    classes = defaultdict(list)
    for v in dag.order:
        if dag.ops[v] not in FREE_OPS and not nodes[dag.keys[v]].calls:
            classes[signature[v]].append(v)
    sizes = Counter(len(members) for members in classes.values() if len(members) > 1)
    if not sizes:
        return {}
    replicas = max(sizes, key=lambda k: (sizes[k], k))
    branch = {}
    for v in dag.order:
        members = classes.get(signature[v])
        if members is None or len(members) != replicas:
            continue
        inherited = next((branch[u] for u in dag.preds[v] if u in branch), None)
        branch[v] = inherited if inherited is not None else members.index(v)
    tower_of = {}
    for v, k in branch.items():
        tower_of.setdefault(dag.keys[v], k)
    return tower_of if len(set(tower_of.values())) > 1 else {}


def towers_graph(seed):
    """Shared inputs, then ``k`` copies of one random tower (each op reads earlier ops of its tower or a shared
    input), then random ops joining them: replicas to find, with noise around them."""
    rng = random.Random(seed)
    graph = protos.GraphDef()
    shared = [f"in{i}" for i in range(rng.randint(1, 3))]
    for name in shared:
        graph.node.add(name=name, op="Placeholder")
    ops = ["Relu", "MatMul", "AddV2", "Tanh", "Mul", "Sigmoid", "Identity"]
    shape = []  # per tower op: (op, [input: ("shared", i) or ("own", j)])
    for j in range(rng.randint(1, 12)):
        picks = [("own", rng.randrange(j)) if j and rng.random() < 0.7 else ("shared", rng.randrange(len(shared)))]
        if rng.random() < 0.4:
            picks.append(("own", rng.randrange(j)) if j else ("shared", 0))
        shape.append((rng.choice(ops), picks))
    towers = rng.randint(2, 5)
    for k in range(towers):
        for j, (op, picks) in enumerate(shape):
            node = graph.node.add(name=f"t{k}/op{j}", op=op)
            node.input.extend(shared[i] if kind == "shared" else f"t{k}/op{i}" for kind, i in picks)
    names = [n.name for n in graph.node]
    for j in range(rng.randint(0, 6)):
        node = graph.node.add(name=f"join{j}", op=rng.choice(ops))
        node.input.extend(rng.sample(names, min(len(names), rng.randint(1, 3))))
        names.append(node.name)
    return graph


@pytest.mark.parametrize("seed", range(40))
def test_identical_branches_match_the_reference(seed):
    for graph in (towers_graph(seed), random_graph(seed, size=80)):
        view = GraphView(graph)
        dag = dag_of(flatten_run(view, None))
        assert list(identical_branches(view).items()) == list(reference_branches(view, dag).items())


def test_towers_are_found_in_the_towers_graph():
    found = [identical_branches(GraphView(towers_graph(seed))) for seed in range(40)]
    assert sum(bool(f) for f in found) >= 20  # the comparison above is not between two empty answers
