"""Robust auto: it chooses the best point estimate among the plans at least as fast as one stream at every corner of
the host box, checked against brute force over every plan and every corner on small hand-built graphs."""

import itertools
import json

import pytest
from conftest import SAMPLES

from msopt.planning.constraints import apply
from msopt.planning.plan import PlanOptions, make_plan
from msopt.simulator.simulate import simulate
from msopt.simulator.uncertainty import corner_figures, is_robust, speedups


def brute_force(v, streams, cost, keys):
    """(best makespan over all plans, best makespan over the robust plans and one stream)."""
    best = robust_best = cost.single_stream_us()
    for assignment in itertools.product(range(streams), repeat=len(keys)):
        plan = apply(v, dict(zip(keys, assignment)), streams)[0]
        makespan = simulate(v, plan, streams, cost).makespan_us
        best = min(best, makespan)
        if makespan < robust_best and is_robust(corner_figures(v, plan, streams, cost)):
            robust_best = makespan
    return best, robust_best


def auto(v, streams, cost):
    result = make_plan(v, PlanOptions(streams=streams, policy="auto"), None, cost)
    return result.partition, result.report


@pytest.mark.parametrize("kernel_us", [0.5, 8.0, 120.0, 170.0, 400.0])
@pytest.mark.parametrize("width, streams", [(2, 2), (3, 3)])
def test_auto_matches_the_brute_force_robust_optimum(fork_join, kernel_us, width, streams):
    v, cost, keys = fork_join(kernel_us, width)
    plan, report = auto(v, streams, cost)
    got = simulate(v, plan, streams, cost).makespan_us
    _, robust_best = brute_force(v, streams, cost, keys)
    assert got == pytest.approx(robust_best, rel=1e-9)
    assert min(speedups(corner_figures(v, plan, streams, cost))) >= 1 - 1e-9  # never slower at any corner
    assert report["auto"]["robust"] is True


def test_a_point_winner_that_is_not_robust_is_passed_over_and_the_note_says_so(fork_join):
    # Two 170 us branches: on two streams they overlap, which pays for the second stream's executor start at
    # the point estimate (150 us) but not at the high end of the host box (200 us).
    v, cost, keys = fork_join(170.0, 2)
    best, robust_best = brute_force(v, 2, cost, keys)
    assert best < robust_best  # the fastest plan at the point estimate loses to one stream at some corner
    plan, report = auto(v, 2, cost)
    assert simulate(v, plan, 2, cost).makespan_us == pytest.approx(robust_best, rel=1e-9)
    (note,) = [n for n in report["notes"] if "passed over" in n]
    assert "over the host assumptions" in note and note.count("x") >= 3  # both plans' figures and the range
    assert report["auto"]["point_estimate_winner_robust"] is False
    assert any(c["robust"] is False for c in report["auto"]["candidates"])


def test_a_robust_point_winner_is_kept(fork_join):
    v, cost, keys = fork_join(200.0, 2)
    plan, report = auto(v, 2, cost)
    assert report["auto"]["point_estimate_winner_robust"] is True
    assert not any("passed over" in n for n in report["notes"])
    assert simulate(v, plan, 2, cost).makespan_us == pytest.approx(brute_force(v, 2, cost, keys)[0], rel=1e-9)


def test_partition_report_records_robust(msopt, tmp_path):
    result = msopt("partition", SAMPLES / "towers_tf2", "--streams", 2, "-o", tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    sim = doc["simulated"]
    assert doc["auto"]["robust"] is True and sim["robust"] is True
    assert sim["speedup_range"][0] >= 1 - 1e-9 and sim["speedup_range"][0] <= sim["speedup"]
    assert len(sim["makespan_ms_range"]) == 2


@pytest.mark.parametrize("name", ["towers_tf1", "deepfm_tf2"])
def test_one_stream_figures_are_shared_only_where_the_copy_engine_alone_differs(sample_view, name):
    """On one stream no edge crosses streams, so the corners that differ only in the copy engine's constants (sync,
    copy latency) share one simulation of one stream; each figure is that of its corner simulated on its own."""
    from msopt.planning.plan import CostOptions, build_cost_model
    from msopt.simulator.simulate import single_stream
    from msopt.simulator.uncertainty import corner_models

    model, view = sample_view(name)
    cost = build_cost_model(view, model, CostOptions(target="h100"))
    corners = corner_models(cost)
    figures = [corner.single_stream_us() for corner in corners]
    assert figures == [single_stream(corner).makespan_us for corner in corners]
    assert len(corners) == 8 and len(cost._arrays["single_stream_us"]) == 4  # the copy-engine dimension collapses
    assert len(set(figures)) >= 2  # the host cost still moves it
