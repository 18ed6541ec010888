"""The flattened run (msopt.graph.flat): the drawn, planned and simulated graphs of a signature are one set of op instances."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from msopt.graph.flat import flat_run
from msopt.graph.op_tables import CONTROL_FLOW_OPS, HIDDEN_IN_DRAWING
from msopt.graph.order import longest_to_sink, priority_order, topological_order
from msopt.graph.view import MAIN, GraphView
from msopt.load import load
from msopt.planning.plan import PlanOptions, make_plan
from msopt.rules import RuleOptions, run_rule
from msopt.rules.walk import flatten
from msopt.simulator.cost import CostModel
from msopt.simulator.simulate import check_streams, stream_array, streams_of
from msopt.visualize import op_streams, signature_ops

pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"

# A TF2 SavedModel whose signature runs a functional If (tf.cond on a tensor predicate) inside its function.
COND_MODEL = """
import os, sys; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'
import tensorflow as tf

class M(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.ones([4, 4]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name='x'), tf.TensorSpec([], tf.bool, name='flag')])
    def __call__(self, x, flag):
        y = tf.cond(flag, lambda: tf.nn.relu(tf.matmul(x, self.w)), lambda: tf.tanh(x) * 2.0)
        return {'y': y + 1.0}

m = M()
tf.saved_model.save(m, sys.argv[1], signatures={'serving_default': m.__call__})
"""


@pytest.fixture(scope="module")
def cond_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("cond") / "cond_tf2"
    subprocess.run([sys.executable, "-c", COND_MODEL, str(path)], check=True, capture_output=True, timeout=300)
    return path


def _model(path):
    model = load(str(path))
    return model, GraphView(model.graph_def)


def _instances(path):
    """(model, view, cost model, drawn ops, simulated instances, drawn instances, planned instances)."""
    model, view = _model(path)
    cost = CostModel(view, model, target="v100")
    t = cost.tasks
    simulated = Counter((t.key[i], t.callers(i)) for i in range(len(t)))
    ops, _, _ = signature_ops(model, view)
    drawn = Counter((op.key, tuple(op.callers)) for op in ops)
    dag = flatten(view, flat_run(view, model)[1])  # what the plan layer hands the rules without a cost model
    planned = Counter(zip(dag.keys, dag.callers))
    return model, view, cost, ops, simulated, drawn, planned


@pytest.mark.parametrize("which", ["stage_tf2", "cond"])
def test_drawn_planned_and_simulated_graphs_are_the_same_op_instances(which, cond_model):
    path = SAMPLES / "stage_tf2" if which == "stage_tf2" else cond_model
    model, view, cost, ops, simulated, drawn, planned = _instances(path)
    # The model runs functional control flow, and its functions' ops are instances nested in the node.
    flow = {k for k, _ in simulated if view.nodes[k].op in CONTROL_FLOW_OPS}
    assert flow, "the model has a functional If/While"
    assert any(set(callers) & flow for _, callers in simulated)
    # Drawn == simulated, op instance by op instance; the drawing only leaves out TF2's main-graph variable handles.
    hidden = Counter(
        {
            inst: n
            for inst, n in simulated.items()
            if view.nodes[inst[0]].function == MAIN and view.nodes[inst[0]].op in HIDDEN_IN_DRAWING
        }
    )
    assert drawn == simulated - hidden
    assert all(n == 1 for n in simulated.values())  # an instance is one (key, call path)
    # The rules plan exactly the instances the run executes, with the same identity.
    assert planned == simulated
    # One plan puts each instance on the same stream in the drawing and in the simulation.
    plan = make_plan(view, PlanOptions(streams=4, policy="chains"), model, cost).partition
    sim_stream = dict(
        zip(((cost.tasks.key[i], cost.tasks.callers(i)) for i in range(len(cost))), streams_of(cost, plan))
    )
    drawn_stream = dict(zip(((op.key, tuple(op.callers)) for op in ops), op_streams(ops, plan)))
    assert drawn_stream == {inst: sim_stream[inst] for inst in drawn_stream}
    # A rule's own plan (before the constraints extend it to colocated nodes) names only nodes the run executes.
    raw = run_rule("chains", view, RuleOptions(streams=4, run=flat_run(view, model)[1])).partition
    assert raw and set(raw) <= {key for key, _ in simulated}


def test_if_branch_arguments_skip_the_predicate(cond_model):
    model, view = _model(cond_model)
    _, t, _ = flat_run(view, model)
    ifs = [i for i in range(len(t)) if t.op[i] in CONTROL_FLOW_OPS]
    assert len(ifs) == 1
    node = view.nodes[t.key[ifs[0]]]
    nested = [i for i in range(len(t)) if node.key in t.callers(i)]
    matmul = [i for i in nested if t.op[i] == "MatMul"]
    assert matmul, "the then-branch is opened"
    producers = {view.nodes[t.key[src]].name for i in nested for src, _ in t.inputs[i]}
    assert "serving_default_x" in producers  # the branch reads the If's argument x ...
    assert "serving_default_flag" not in producers  # ... and never its predicate


def test_control_flow_node_waits_for_its_functions_and_launches_no_kernel(cond_model):
    model, view = _model(cond_model)
    cost = CostModel(view, model, target="v100")
    t = cost.tasks
    (node,) = [i for i in range(len(t)) if t.op[i] in CONTROL_FLOW_OPS]
    nested = [i for i in range(len(t)) if t.key[node] in t.callers(i)]
    assert nested and all(i < node for i in nested)  # the topological order has the branches first
    assert not cost.kernel[node] and cost.duration[node] == 0.0
    assert any(cost.kernel[i] for i in nested)  # the branches' ops are the kernels
    for i in range(len(t)):  # every edge goes forward
        assert all(s < i for s, _ in t.inputs[i]) and all(s < i for s in t.control[i])


def test_topological_order_is_first_ready_first_served_and_survives_a_cycle():
    succs = [[2], [2], [3], []]
    assert topological_order(succs, [0, 0, 2, 1]) == [0, 1, 2, 3]
    cyclic = [[1], [2], [1], []]  # 1 <-> 2
    order = topological_order(cyclic, [0, 2, 1, 0])
    assert sorted(order) == [0, 1, 2, 3] and order[:2] == [0, 3]


def test_priority_order_takes_the_best_ready_vertex_lowest_id_first_and_leaves_cycles_out():
    # 0 and 1 ready at once: 1 has the higher priority; 3 and 2 are then ready with equal priorities: lower id first.
    succs = [[2], [3, 2], [], []]
    assert priority_order(succs, [1.0, 5.0, 0.0, 0.0]) == [1, 0, 2, 3]
    assert priority_order([[1], [2], [1], []], [0.0, 0.0, 0.0, 9.0]) == [3, 0]  # 1 <-> 2 held back


def test_longest_to_sink_counts_each_vertex_once():
    succs = [[1, 2], [3], [3], []]
    assert longest_to_sink([0, 1, 2, 3], succs, [1.0, 5.0, 2.0, 3.0]) == [9.0, 8.0, 5.0, 3.0]


def test_op_tables_and_the_sort_are_defined_once():
    sources = {p: p.read_text() for p in (ROOT / "msopt").rglob("*.py")}
    for name in ("CALL_OPS", "NO_KERNEL_OPS", "BACK_EDGE_OPS", "FIRST_INPUT_IS_PREDICATE", "FREE_OPS", "NEUTRAL_OPS"):
        defined = [p.name for p, text in sources.items() if f"\n{name} = " in text]
        assert defined == ["op_tables.py"], (name, defined)
    spelled = [p.name for p, text in sources.items() if '"PartitionedCall", "StatefulPartitionedCall"' in text]
    assert spelled == ["op_tables.py"]
    kahn = [
        p.name
        for p, text in sources.items()
        if "def topological_order(succs" in text or "def kahn_order(" in text or "def _topological(nodes" in text
    ]
    assert kahn == ["order.py"]
    # One inliner: only msopt.graph.flat opens the functions a node runs and binds their arguments to its inputs.
    inliners = [p.name for p, text in sources.items() if "opened_functions(" in text or "argument_input(" in text]
    assert inliners == ["flat.py"]


def test_cost_split_keeps_modules_small_and_names_importable():
    from msopt.simulator import cost

    for name in (
        "CostModel",
        "TARGETS",
        "DEFAULT_TARGET",
        "Target",
        "gc_paused",
        "load_costs",
        "MIN_KERNEL_US",
        "NO_KERNEL_OPS",
        "Tasks",
    ):
        assert hasattr(cost, name), name
    for module in (
        "simulator/cost",
        "graph/flat",
        "simulator/shapes",
        "simulator/kernels",
        "simulator/targets",
        "graph/op_tables",
        "graph/order",
        "compiled/gc_pause",
    ):
        lines = (ROOT / "msopt" / f"{module}.py").read_text().count("\n")
        assert lines < 400, (module, lines)


@pytest.mark.parametrize("which", ["stage_tf2", "cond"])
def test_stream_array_is_the_checked_streams_of_a_partition(which, cond_model):
    """The auto search reads a plan's task streams straight into an array: the same as check_streams(streams_of)
    on runs with calls inlined, and the same error for a stream outside the range."""
    model, view = _model(SAMPLES / "stage_tf2" if which == "stage_tf2" else cond_model)
    cost = CostModel(view, model)
    assert len(cost.tasks.instances) > 1  # calls inlined: a task takes its caller's stream
    plan = make_plan(view, PlanOptions(streams=4, policy="chains"), model, cost).partition
    expected = check_streams(cost.tasks.key, streams_of(cost, plan), 4)
    assert stream_array(cost, plan, 4).tolist() == expected.tolist() and len(set(expected.tolist())) > 1
    bad = dict(plan)
    bad[next(iter(bad))] = 9
    with pytest.raises(ValueError, match=r"is on stream 9, outside \[0, 4\)"):
        stream_array(cost, bad, 4)
