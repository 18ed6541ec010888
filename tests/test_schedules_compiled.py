"""The compiled list schedules, orders and greedy path cover give exactly the plans, orders, ranks and chains of
the plain Python reference (tests/reference_schedules.py) on random DAGs and on the sample models."""

import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import reference_schedules as ref

from msopt.graph.flat import Tasks
from msopt.graph.op_tables import FREE_OPS
from msopt.graph.order import kahn_order, longest_to_sink, topological_order
from msopt.rules import RuleOptions
from msopt.rules.chains import chains, fold, greedy_path_cover, minimum_chains, path_cover
from msopt.rules.walk import Dag, flatten, vertex_costs
from msopt.simulator.list_schedule import arrays, schedule
from msopt.simulator.targets import DEFAULT_TARGET, TARGETS

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "sample_models"
SAMPLES = [
    "bilinear_tf1",
    "deepfm_tf1",
    "deepfm_tf2",
    "linreg_tf2",
    "stage_tf1",
    "stage_tf2",
    "towers_tf1",
    "towers_tf2",
]


class RandomCost:
    """The parts of a cost model the list schedule reads, for a random DAG of op instances."""

    def __init__(self, seed, n=None, ties=False):
        rng = random.Random(seed)
        n = rng.randint(1, 120) if n is None else n
        t = self.tasks = Tasks()
        nodes = max(1, n - rng.randint(0, n // 3))  # some nodes run several instances
        for i in range(n):
            t.key.append(f"node{rng.randrange(nodes)}")
            t.op.append("Op")
            t.instance.append(0)
            width = min(i, rng.choice((0, 1, 1, 2, 3, 5)))
            back = rng.choice((2, 6, i + 1))  # local edges mostly, far ones sometimes
            srcs = [rng.randrange(max(0, i - back), i) for _ in range(width)] if i else []
            t.inputs.append([(s, rng.randrange(2)) for s in srcs])  # repeats: one input read twice
            ctl = [rng.randrange(i) for _ in range(rng.choice((0, 0, 0, 1, 2)))] if i else []
            t.control.append(ctl)  # may repeat a data input
        times = (0.0, 1.0, 2.0, 4.0) if ties else None
        self.duration = [rng.choice(times) if ties else rng.choice((0.0, rng.uniform(0.1, 50.0))) for _ in range(n)]
        self.kernel = [d > 0 or rng.random() < 0.1 for d in self.duration]
        self.share = [rng.choice((1.0, 0.25, rng.random())) if k else 0.0 for k in self.kernel]
        self.neutral = [rng.random() < 0.15 for _ in range(n)]
        self.out_bytes = [[rng.choice((0, 4, 4096, 1 << 20)) for _ in range(rng.randint(0, 2))] for _ in range(n)]
        target = TARGETS[rng.choice(sorted(TARGETS))]
        self.target = replace(target, partition_overhead_us=rng.choice((0.0, 0.0, 3.0)))

    def output_arrays(self):
        """(ptr, bytes) of ``out_bytes``, as CostModel.output_arrays gives them."""
        ptr = np.zeros(len(self.out_bytes) + 1, np.int64)
        np.cumsum([len(b) for b in self.out_bytes], out=ptr[1:])
        return ptr, np.array([x for b in self.out_bytes for x in b], np.int64)


def random_succs(rng, n, cycles):
    """Successor lists of a random graph over n vertices (repeated edges; back edges, i.e. cycles, if asked)."""
    succs = [[] for _ in range(n)]
    for v in range(n):
        for _ in range(rng.choice((0, 1, 2, 3))):
            if v + 1 < n:
                succs[v].append(rng.randrange(v + 1, min(n, v + 8)))
        if cycles and v and rng.random() < 0.1:
            succs[v].append(rng.randrange(v))
    perm = list(range(n))
    rng.shuffle(perm)  # vertex numbers not in topological order
    out = [[] for _ in range(n)]
    for v in range(n):
        out[perm[v]] = [perm[w] for w in succs[v]]
    return out


def indegrees(succs):
    count = [0] * len(succs)
    for ws in succs:
        for w in ws:
            count[w] += 1
    return count


def random_dag(rng, n, cycles):
    """A Dag over a random graph (repeated edges kept), its order Kahn's with cycles released."""
    succs = random_succs(rng, n, cycles)
    preds = [[] for _ in range(n)]
    for v, ws in enumerate(succs):
        for w in ws:
            preds[w].append(v)
    dag = Dag.of_lists(["k"] * n, preds, succs)
    dag.order = ref.topological_order(succs, [len(p) for p in preds])
    return dag


@pytest.mark.parametrize("ties", [False, True])
def test_list_schedules_match_the_reference_on_random_dags(ties):
    for seed in range(60):
        cost = RandomCost(seed, ties=ties)
        for streams in range(1, 9):
            for chained, by_rank in ((False, True), (True, True), (False, False)):
                want = ref.schedule(cost, streams, chained=chained, by_rank=by_rank)
                got = schedule(cost, streams, chained=chained, by_rank=by_rank)
                assert list(got.items()) == list(want.items()), (seed, streams, chained, by_rank)


def test_list_schedule_larger_random_dags_and_equal_ranks():
    for seed in range(4):
        cost = RandomCost(1000 + seed, n=3000, ties=True)
        for streams in (2, 3, 8):
            for chained in (False, True):
                assert schedule(cost, streams, chained=chained) == ref.schedule(cost, streams, chained=chained)


def test_priority_order_and_ranks_match_the_reference():
    for seed in range(40):
        cost = RandomCost(seed, ties=seed % 2 == 0)
        a = arrays(cost)
        n = a.n
        preds = [list(dict.fromkeys([s for s, _ in cost.tasks.inputs[i]] + cost.tasks.control[i])) for i in range(n)]
        succs = [[] for _ in range(n)]
        for i, ps in enumerate(preds):
            for p in ps:
                succs[p].append(i)
        assert [a.pred_idx[a.pred_ptr[i] : a.pred_ptr[i + 1]].tolist() for i in range(n)] == preds
        assert [a.succ_idx[a.succ_ptr[i] : a.succ_ptr[i + 1]].tolist() for i in range(n)] == succs
        rank = ref.longest_to_sink(range(n), succs, cost.duration)
        assert a.rank().tolist() == rank
        assert a.priority_order().tolist() == list(ref._priority_order(preds, succs, rank))


def test_orders_match_the_reference_on_random_graphs_with_cycles():
    rng = random.Random(7)
    for trial in range(300):
        n = rng.randint(0, 60)
        succs = random_succs(rng, n, cycles=trial % 2 == 1)
        degree = indegrees(succs)
        want = ref.topological_order(succs, list(degree))
        assert topological_order(succs, list(degree)) == want
        assert kahn_order(succs, list(degree)) == ref.kahn_order(succs, list(degree))
        cost = [rng.choice((0.0, 1.0, rng.uniform(0, 9))) for _ in range(n)]
        assert longest_to_sink(want, succs, cost) == ref.longest_to_sink(want, succs, cost)


def test_topological_order_leaves_its_input_whole_and_kahn_order_consumes_it():
    succs = [[1], [2], [1], []]
    degree = [0, 2, 1, 0]
    assert topological_order(succs, degree) == [0, 3, 1, 2] and degree == [0, 2, 1, 0]
    theirs = list(degree)
    assert kahn_order(succs, degree) == ref.kahn_order(succs, theirs) == [0, 3]
    assert degree == theirs == [0, 1, 1, 0]


def test_greedy_path_cover_matches_the_reference_on_random_dags():
    rng = random.Random(11)
    for trial in range(300):
        dag = random_dag(rng, rng.randint(0, 80), cycles=trial % 3 == 2)
        assert greedy_path_cover(dag).tolist() == ref.greedy_path_cover(dag), trial


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_models_plans_orders_ranks_and_chains_match_the_reference(sample_cost, name):
    model, view, cost = sample_cost(name)
    for streams in range(1, 9):
        for chained, by_rank in ((False, True), (True, True), (False, False)):
            want = ref.schedule(cost, streams, chained=chained, by_rank=by_rank)
            assert list(schedule(cost, streams, chained=chained, by_rank=by_rank).items()) == list(want.items())
    dag = flatten(view, cost.tasks)
    degree = [len(p) for p in dag.preds]
    assert topological_order(dag.succs, degree) == ref.topological_order(dag.succs, degree)
    cost_per_vertex = [float(i % 5) for i in range(len(dag))]
    want = ref.longest_to_sink(dag.order, dag.succs, cost_per_vertex)
    assert longest_to_sink(dag.order, dag.succs, cost_per_vertex) == want
    assert greedy_path_cover(dag).tolist() == ref.greedy_path_cover(dag)


def test_cost_model_on_another_target_gets_its_own_schedule(sample_cost):
    _, _, cost = sample_cost("towers_tf2")
    slow = cost.with_target(replace(TARGETS[DEFAULT_TARGET], sync_us=500.0, copy_latency_us=500.0))
    for c in (cost, slow, cost):
        assert schedule(c, 4) == ref.schedule(c, 4)


def test_path_covers_and_folds_match_the_reference_on_random_dags():
    rng = random.Random(13)
    for trial in range(200):
        dag = random_dag(rng, rng.randint(0, 80), cycles=trial % 3 == 2)
        cover = path_cover(dag).tolist()
        assert cover == ref.path_cover(dag), trial
        cost = [rng.choice((0.0, 1.0, 2.0)) if trial % 2 else rng.uniform(0, 5) for _ in range(len(dag))]
        for chain_of in (cover, ref.greedy_path_cover(dag)):
            for streams in range(1, 9):
                assert fold(dag, chain_of, cost, streams).tolist() == ref.fold(dag, chain_of, cost, streams), (
                    trial,
                    streams,
                )


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_models_chain_plans_match_the_reference(sample_cost, name):
    model, view, cost_model = sample_cost(name)
    for run in (None, cost_model.tasks):
        dag = flatten(view, run)
        for streams in (1, 2, 4, 8):
            options = RuleOptions(streams=streams, run=run)
            cost = vertex_costs(view, dag, options)
            if run is None:  # one unit per kernel, none for bookkeeping ops and calls
                nodes = view.nodes
                free = [nodes[k].op in FREE_OPS or bool(nodes[k].calls) for k in dag.keys]
                assert cost.tolist() == [0.0 if f else 1.0 for f in free]
            want = dag.partition(ref.fold(dag, ref.greedy_path_cover(dag), cost.tolist(), streams))
            assert chains(view, options) == want
            want = dag.partition(ref.fold(dag, ref.path_cover(dag), cost.tolist(), streams))
            assert minimum_chains(view, options) == want


def test_importing_msopt_and_inspect_do_not_import_numba():
    code = (
        "import sys, msopt, msopt.api\n"
        "from msopt.cli import main\n"
        "sys.argv = ['msopt', 'inspect', sys.argv[1]]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'numba' not in sys.modules, 'numba imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(SAMPLE_DIR / "deepfm_tf2")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
