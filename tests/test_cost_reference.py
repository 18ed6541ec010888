"""The array cost model equals the per-op reference (tests/reference_cost.py) exactly: tasks, shapes and every figure."""

import random

import pytest
from conftest import SAMPLES
from random_graphs import random_graph
from reference_cost import Reference

from msopt.errors import InputError
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.simulator import shapes
from msopt.simulator.cost import TARGETS, CostModel

TASK_FIELDS = ("key", "op", "instance", "inputs", "control", "instances")
FIGURES = ("duration", "share", "kernel", "flops", "neutral", "out_bytes", "shapes", "unknown_shapes", "measured")
SAMPLE_DIRS = sorted(p for p in SAMPLES.iterdir() if p.is_dir() or p.suffix == ".pb")


def outcome(make):
    """What building gives: the object, or the error it raises (type and message)."""
    try:
        return make()
    except (InputError, IndexError) as e:
        return (type(e), str(e))


def assert_same(view, model=None, **options):
    new = outcome(lambda: CostModel(view, model, **options))
    old = outcome(lambda: Reference(view, model, **options))
    if isinstance(old, tuple) or isinstance(new, tuple):
        assert new == old
        return 0
    for name in TASK_FIELDS:
        assert getattr(new.tasks, name) == getattr(old.tasks, name), name
    for name in FIGURES:
        mine, theirs = getattr(new, name), getattr(old, name)
        assert mine == theirs, name
        if isinstance(mine, list):  # the same Python types too (no numpy scalars, ints stay ints)
            assert list(map(type, mine)) == list(map(type, theirs)), name
            if name == "out_bytes":
                assert [list(map(type, x)) for x in mine] == [list(map(type, x)) for x in theirs]
    assert (new.successors(), new.pred_count()) == old.successors()
    data_ptr, data_src, data_port, control_ptr, control_src = new.tasks.csr()
    assert data_ptr[-1] == sum(map(len, old.tasks.inputs)) and control_ptr[-1] == sum(map(len, old.tasks.control))
    return len(new)


@pytest.mark.parametrize("path", SAMPLE_DIRS, ids=lambda p: p.name)
def test_sample_models_equal_the_reference(path):
    model = load(str(path))
    view = GraphView(model.graph_def)
    for signature in sorted(model.signatures) or [None]:
        assert assert_same(view, model, signature=signature, target="v100") > 0
        assert_same(view, model, signature=signature, target="t4", batch_size=64)
    assert_same(view)  # every main-graph node, no signature


@pytest.mark.parametrize("compiled", [False, True], ids=["python", "compiled"])
@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_equal_the_reference(seed, compiled, monkeypatch):
    """Calls, If/While, recursion, v1 loops, control edges, named and missing ports, recorded shapes, half
    and int dtypes, every shape-dependent kernel, measured costs; the compiled unknown-shape pass too."""
    if compiled:
        monkeypatch.setattr(shapes, "COMPILED_FROM", 0)
    rng = random.Random(seed)
    graph = random_graph(seed, size=rng.choice((40, 150, 400)))
    view = GraphView(graph)
    keys = sorted(view.nodes)
    measured = {k: rng.choice((0, 0.5, 3, 7.25)) for k in rng.sample(keys, min(len(keys), 10))}
    target = rng.choice(sorted(TARGETS))
    tasks = assert_same(view, target=target, batch_size=rng.choice((1, 3, 256)), costs=measured)
    assert_same(view, target=target)
    assert tasks or seed  # the graphs are not all empty


def test_huge_shapes_keep_exact_integers():
    """Element counts beyond 2**53: the figures are computed on Python integers, as the reference does."""
    graph = random_graph(3, size=60)
    for node in graph.node:
        if node.op == "Placeholder":
            del node.attr["shape"].shape.dim[:]
            for size in (-1, 2**31 - 1, 2**31 - 1, 7):
                node.attr["shape"].shape.dim.add(size=size)
    view = GraphView(graph)
    assert assert_same(view, target="a100", batch_size=2**31 - 1) > 0


def test_layered_graph_equals_the_reference(monkeypatch):
    """The benchmark's layered DAG (no attributes, no shapes) through the compiled unknown-shape pass."""
    from msopt.graph import protos

    monkeypatch.setattr(shapes, "COMPILED_FROM", 10000)
    rng = random.Random(5)
    graph = protos.GraphDef()
    width = 16
    for i in range(shapes.COMPILED_FROM + 500):
        layer = i // width
        if layer == 0:
            graph.node.add(name=f"n{i}", op="Placeholder")
            continue
        inputs = sorted({(layer - 1) * width + rng.randrange(width) for _ in range(rng.choice((1, 2, 3)))})
        op = {1: "Relu", 2: "AddV2", 3: "AddN"}[len(inputs)] if rng.random() < 0.98 else "Shape"
        graph.node.add(name=f"n{i}", op=op).input.extend(f"n{j}" for j in inputs)
    assert assert_same(GraphView(graph)) == shapes.COMPILED_FROM + 500


@pytest.mark.parametrize("seed", range(8))
def test_neighbour_lists_equal_the_lists_they_summarize(seed):
    """The rules' predecessor and successor lists (Tasks.neighbour_lists, from the arrays) are what the
    per-task lists give: distinct predecessors, data inputs in order then control ones; successors ascending."""
    view = GraphView(random_graph(100 + seed, size=300))
    tasks = outcome(lambda: CostModel(view).tasks)
    if isinstance(tasks, tuple):
        return
    preds, succs = tasks.neighbour_lists()
    assert preds == [list(dict.fromkeys([s for s, _ in i] + c)) for i, c in zip(tasks.inputs, tasks.control)]
    expected = [[] for _ in preds]
    for v, ps in enumerate(preds):
        for u in ps:
            expected[u].append(v)
    assert succs == expected
    assert sum(map(len, preds)) > 0


def test_negative_ports_read_as_list_indices_do(hand_view):
    """A hand-built view may name output -1 (the last) or -2 (none: an error), as a Python list index would."""
    assert assert_same(hand_view([("a", "Placeholder", []), ("b", "Relu", ["a:-1"]), ("c", "Relu", ["b"])])) == 3
    assert assert_same(hand_view([("a", "Placeholder", []), ("b", "Relu", ["a:-2"])])) == 0  # both raise the same
