"""Policy auto: on hand-built graphs its plan is as fast as the best of every possible plan (found by brute force)."""

import itertools
import json

import pytest

from msopt.planning.constraints import apply
from msopt.planning.plan import PlanOptions, make_plan
from msopt.simulator.cost import CostModel
from msopt.simulator.simulate import simulate

pytestmark = pytest.mark.tf


def auto_plan(v, streams, cost, model=None):
    """The auto search's plan, after the constraints; Consts stay where it put them (their moves come after the
    search: tests/test_written_run.py)."""
    result = make_plan(v, PlanOptions(streams=streams, policy="auto", const_dup=False), model, cost)
    return result.partition, result.report


def brute_force_best(v, streams, cost, keys, robust=False):
    """The shortest simulated makespan over every assignment of ``keys`` to streams (after the constraints);
    with ``robust``, over the plans at least as fast as one stream at every corner of the host box."""
    from msopt.simulator.uncertainty import corner_figures, is_robust

    best = None
    for streams_of in itertools.product(range(streams), repeat=len(keys)):
        plan = apply(v, dict(zip(keys, streams_of)), streams)[0]
        if robust and len(set(streams_of)) > 1 and not is_robust(corner_figures(v, plan, streams, cost)):
            continue
        makespan = simulate(v, plan, streams, cost).makespan_us
        best = makespan if best is None else min(best, makespan)
    return best


@pytest.mark.parametrize("width,streams", [(2, 2), (3, 2), (4, 4), (3, 3)])
def test_long_independent_kernels_match_the_brute_force_optimum(fork_join, width, streams):
    v, cost, keys = fork_join(200.0, width)
    plan, report = auto_plan(v, streams, cost)
    got = simulate(v, plan, streams, cost).makespan_us
    assert got == pytest.approx(brute_force_best(v, streams, cost, keys), rel=1e-9)
    assert got < cost.single_stream_us() * 0.75  # the branches really run concurrently
    assert len({plan[k] for k in keys[:-1]}) == min(width, streams)


def test_tiny_kernels_stay_on_one_stream_and_auto_says_why(fork_join):
    v, cost, keys = fork_join(1.0, 4)  # a sync costs more than the work it would overlap (at some host corner)
    plan, report = auto_plan(v, 4, cost)
    got = simulate(v, plan, 4, cost).makespan_us
    assert got == pytest.approx(brute_force_best(v, 4, cost, keys, robust=True), rel=1e-9)
    assert got == pytest.approx(cost.single_stream_us())
    assert set(plan.values()) <= {0}
    assert any("uses 1 of 4 streams: parallelism does not pay" in note for note in report["notes"])


def test_a_chain_uses_one_stream(hand_view):
    v = hand_view([("x", "Placeholder", []), ("a", "MatMul", ["x", "x"]), ("b", "Relu", ["a"]), ("c", "Tanh", ["b"])])
    cost = CostModel(v, None, target="v100", costs={"a": 100.0, "b": 50.0, "c": 50.0})
    plan, report = auto_plan(v, 4, cost)
    assert set(plan.values()) <= {0}
    assert report["auto"]["streams_used"] == 1


def test_uneven_branches_on_two_streams_match_the_brute_force_optimum(hand_view):
    # One long branch (3 x 100 us) and three short ones (30 us): the short ones share the other stream.
    spec = [
        ("x", "Placeholder", []),
        ("l1", "MatMul", ["x", "x"]),
        ("l2", "MatMul", ["l1", "x"]),
        ("l3", "MatMul", ["l2", "x"]),
        ("s1", "Relu", ["x"]),
        ("s2", "Relu", ["x"]),
        ("s3", "Relu", ["x"]),
        ("join", "AddN", ["l3", "s1", "s2", "s3"]),
    ]
    v = hand_view(spec)
    times = {"l1": 100.0, "l2": 100.0, "l3": 100.0, "s1": 30.0, "s2": 30.0, "s3": 30.0, "join": 5.0}
    cost = CostModel(v, None, target="v100", costs=times)
    plan, _ = auto_plan(v, 2, cost)
    got = simulate(v, plan, 2, cost).makespan_us
    assert got == pytest.approx(brute_force_best(v, 2, cost, list(times)), rel=1e-9)


@pytest.mark.parametrize("name", ["linreg_tf1", "towers_tf1", "towers_tf2", "stage_tf1", "deepfm_tf1", "deepfm_tf2"])
@pytest.mark.parametrize("batch", [1, 32])
def test_never_slower_than_one_stream_on_the_samples(name, batch, sample_cost):
    model, v, cost = sample_cost(name, target="v100", batch_size=batch)
    plan, report = auto_plan(v, 4, cost, model)
    assert simulate(v, plan, 4, cost).makespan_us <= cost.single_stream_us()
    chosen = [c for c in report["auto"]["candidates"] if c["robust"] is not False]  # auto takes robust plans only
    assert min(c["makespan_ms"] for c in chosen) == pytest.approx(
        simulate(v, plan, 4, cost).makespan_us / 1000, abs=1e-6
    )


def test_auto_beats_one_stream_on_the_towers_at_batch_32(sample_cost):
    model, v, cost = sample_cost("towers_tf1", target="v100", batch_size=32)
    plan, _ = auto_plan(v, 2, cost, model)
    assert simulate(v, plan, 2, cost).makespan_us < 0.8 * cost.single_stream_us()


def test_auto_is_the_default_and_its_plan_verifies(msopt, sample, tmp_path):
    result = msopt(
        "partition",
        sample("towers_tf1"),
        "--streams",
        4,
        "--target",
        "v100",
        "--batch-size",
        32,
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        tmp_path / "out",
        "--verify",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["policy"] == "auto" and doc["verify"]["ok"]
    used = doc["auto"]["streams_used"]  # the two towers, and with parallel executors the host work beside them
    assert 2 <= used < 4 and any(f"uses {used} of 4 streams" in n for n in doc["notes"])
    assert doc["simulated"]["speedup"] > 1.2


def test_auto_notes_in_the_human_report(msopt, sample, tmp_path):
    result = msopt("partition", sample("linreg_tf1"), "--streams", 2, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "auto uses 1 of 2 streams: parallelism does not pay" in result.stdout


@pytest.mark.parametrize("name", ["stage_tf2", "deepfm_tf2"])
def test_auto_plans_of_tf2_samples_verify(msopt, sample, tmp_path, name):
    result = msopt(
        "partition",
        sample(name),
        "--streams",
        4,
        "--batch-size",
        32,
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        tmp_path / "out",
        "--verify",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verify"]["ok"]


@pytest.mark.slow
def test_auto_on_nasnet_uses_several_streams_and_verifies(msopt, nasnet_mobile, tmp_path):
    result = msopt(
        "partition",
        nasnet_mobile,
        "--streams",
        4,
        "--target",
        "v100",
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        tmp_path / "out",
        "--verify",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verify"]["ok"]
    assert doc["auto"]["streams_used"] > 1 and doc["simulated"]["speedup"] > 1.3


@pytest.mark.slow
def test_the_plan_returned_is_the_best_candidate_simulated(nasnet_mobile, sample_cost):
    model, v, cost = sample_cost(nasnet_mobile, target="v100", batch_size=1)
    plan, report = auto_plan(v, 4, cost, model)
    best = min(c["makespan_ms"] for c in report["auto"]["candidates"] if c["robust"] is not False)
    assert simulate(v, plan, 4, cost).makespan_us / 1000 == pytest.approx(best, abs=1e-6)
    assert best < cost.single_stream_us() / 1000 / 1.3
