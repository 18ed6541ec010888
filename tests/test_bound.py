"""The stream-count bounds of msopt.simulator.bound: what they add to the simulator's lower bound, and that no simulated plan beats them."""

import random

import pytest
from test_simulate import graph, target

from msopt.simulator.bound import stream_bound
from msopt.simulator.cost import CostModel
from msopt.simulator.simulate import lower_bound, simulate

SHAPE = [1]


def fan(width, trunk=0):
    """x -> trunk t0..t{trunk-1} -> width independent ops k0..k{width-1} (each reads the trunk's end, or x)."""
    spec = [("x", "Placeholder", [], SHAPE)]
    last = "x"
    for i in range(trunk):
        spec.append((f"t{i}", "Relu", [last], SHAPE))
        last = f"t{i}"
    spec += [(f"k{i}", "Relu", [last], SHAPE) for i in range(width)]
    return graph(spec)


def model(view, costs, gpu=None):
    return CostModel(view, None, target=gpu or target(), batch_size=1, costs=costs)


def test_independent_kernels_cannot_beat_their_time_over_the_streams():
    """8 independent 10 us kernels on 2 streams: the old bound says 10 us (one kernel), the run needs 40."""
    view = fan(8)
    cm = model(view, {f"k{i}": 10 for i in range(8)})
    assert lower_bound(cm)["lower_bound_us"] == pytest.approx(10)  # the stream-blind bound
    result = simulate(view, {f"k{i}": i % 2 for i in range(8)}, 2, cm)
    report = result.report()
    assert report["serial_streams_ms"] == pytest.approx(0.040)
    assert report["lower_bound_ms"] == pytest.approx(0.040) == report["makespan_ms"]
    assert report["ratio_to_bound"] == pytest.approx(1.0)
    assert stream_bound(cm, 4)["serial_us"] == pytest.approx(20)


def test_a_waist_adds_the_work_behind_it_over_the_streams():
    """A 100 us trunk, then 6 ops of 10 us: on 3 streams nothing ends before 100 + 60 / 3 = 120 us."""
    view = fan(6, trunk=2)
    costs = {"t0": 50, "t1": 50, **{f"k{i}": 10 for i in range(6)}}
    cm = model(view, costs)
    bound = stream_bound(cm, 3)
    assert bound["cut_us"] == pytest.approx(120)
    assert bound["serial_us"] == pytest.approx(160 / 3)
    assert lower_bound(cm)["lower_bound_us"] == pytest.approx(110)  # critical path: trunk + one op
    best = simulate(view, {f"k{i}": i % 3 for i in range(6)}, 3, cm)
    assert best.makespan_us == pytest.approx(120, rel=1e-3)  # plus a 4-byte copy from the trunk
    assert best.lower_bound_us == pytest.approx(120)


def random_graph(rng, n):
    spec = [("x", "Placeholder", [], SHAPE)]
    names = ["x"]
    for i in range(n):
        k = rng.randint(1, min(3, len(names)))
        spec.append((f"n{i}", rng.choice(["Relu", "AddV2", "Mul"]), rng.sample(names, k), SHAPE))
        names.append(f"n{i}")
    return graph(spec), [f"n{i}" for i in range(n)]


@pytest.mark.parametrize("seed", range(12))
def test_no_simulated_plan_beats_the_bound(seed):
    """Random DAGs, costs, overheads and plans on 1 to 4 streams: the makespan is never below the bound."""
    rng = random.Random(seed)
    view, names = random_graph(rng, rng.randint(5, 40))
    gpu = target(launch=rng.choice([0.0, 1.0, 4.0]), sync=rng.choice([0.0, 3.0]), copy_latency=rng.choice([0.0, 2.0]))
    cm = model(view, {k: rng.choice([1, 2, 5, 20, 80]) for k in names}, gpu)
    for _ in range(6):
        streams = rng.randint(1, 4)
        plan = {k: rng.randrange(streams) for k in names}
        result = simulate(view, plan, streams, cm)
        report = result.report()
        assert result.makespan_us >= result.lower_bound_us * (1 - 1e-9), (seed, streams, report)
        assert report["lower_bound_ms"] >= max(report["serial_streams_ms"], report["cut_ms"]) - 1e-9
