"""The auto search's bookkeeping: packed candidates give back each plan as given, and the robustness flags of
plans checked corner by corner (stopping at a slower corner) are those of every corner simulated."""

from dataclasses import replace
from pathlib import Path

import pytest

from msopt.load import open_model
from msopt.planning.constraints import apply
from msopt.planning.plan import CostOptions, PlanOptions, build_cost_model, make_plan, rule_options
from msopt.rules import auto
from msopt.simulator.simulate import stream_array
from msopt.simulator.uncertainty import corner_figures_of, is_robust

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"


def test_kept_candidates_give_back_each_plan_as_given():
    import numpy as np

    plans = [{}, {"a": 1, "b": 0, "c": 3}, {"a": 2, "b": 2, "c": 0}, {"c": 1, "a": 0, "b": 300}, {"x": 0}]
    run_keys = ("a", "b", "c")
    kept = auto.Kept(run_keys, 3)
    for k, plan in enumerate(plans[1:], 1):
        kept.add(kept.shared_keys(plan), auto._values(plan), np.array([k % 4, 0, 1], np.int64))
    for k, plan in enumerate(plans):
        assert list(kept.plan(k).items()) == list(plan.items())  # same keys, order and streams
        assert all(type(s) is int for s in kept.plan(k).values())
    assert kept.keys[1] is kept.keys[2] is run_keys and kept.keys[3] is not kept.keys[1]  # a key order kept once
    assert [s.tolist() for s in kept.streams[1:3]] == [[1, 0, 1], [2, 0, 1]]


@pytest.mark.parametrize("name,target", [("towers_tf2", "h100"), ("towers_tf2", "v100"), ("towers_tf1", "h100")])
def test_robust_flags_are_those_of_every_corner_simulated(name, target):
    model, view = open_model(SAMPLES / name)
    options = PlanOptions(streams=4, cost=CostOptions(target=target))
    cost = build_cost_model(view, model, options.cost)
    rows = make_plan(view, options, model, cost).report["auto"]["candidates"]
    assert sum(row["robust"] is False for row in rows) >= 1  # plans were passed over
    search_options = replace(rule_options(options, cost), run=cost.tasks)
    scope = frozenset(cost.tasks.key)
    found = auto.candidates(view, search_options, cost, len(cost) > auto.LARGE)
    for row, (label, plan) in zip(rows[1:], found, strict=True):
        assert row["plan"] == label
        if row["robust"] is None:  # slower than the plan chosen: not checked
            continue
        placed = apply(view, auto.compact(auto.as_dict(cost, plan)), 4, scope=scope, records=False)[0]
        assert is_robust(corner_figures_of(cost, stream_array(cost, placed, 4), 4)) == row["robust"], label


ALL_SAMPLES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", ALL_SAMPLES)
def test_placed_streams_are_the_constraints_then_the_runs_read(name):
    """The search's array placement gives each task the stream that constraints.apply then stream_array give: for
    every candidate of the search, and for random plans (some keys left out, so groups vote and fill in)."""
    import random

    import numpy as np

    from msopt.planning.placed_streams import PlacedStreams

    model, view = open_model(SAMPLES / name)
    options = PlanOptions(streams=4)
    cost = build_cost_model(view, model, options.cost)
    placed = PlacedStreams(view, cost)
    run_keys, _ = cost.tasks.distinct()
    kept = auto.Kept(run_keys, len(cost))

    def dict_path(plan):
        return stream_array(cost, apply(view, plan, 4, scope=placed.scope, records=False)[0], 4)

    def place(plan):
        return placed(np.fromiter(plan.values(), np.int64, len(plan)), kept.shared_keys(plan), 4)

    search_options = replace(rule_options(options, cost), run=cost.tasks)
    arrays = 0
    for _, plan in auto.candidates(view, search_options, cost, False):
        if isinstance(plan, np.ndarray):  # over the run's keys: the same as its dict
            assert auto.compact_array(plan).tolist() == list(auto.compact(auto.as_dict(cost, plan)).values())
            found = placed(auto.compact_array(plan), run_keys, 4)
            plan = auto.as_dict(cost, plan)
        else:
            found = place(auto.compact(plan))
        if found is not None:
            arrays += 1
            assert found.dtype == np.int64 and found.tolist() == dict_path(auto.compact(plan)).tolist()
    assert arrays >= 5
    rng, keys = random.Random(name), list(run_keys)
    for trial in range(40):
        plan = {k: rng.randrange(4) for k in keys if rng.random() < (0.5, 0.9, 1.0)[trial % 3]}
        found = place(plan)
        assert found is not None and found.tolist() == dict_path(plan).tolist()
    outside = next((n.key for n in view.real_nodes() if n.key not in placed.scope), None)
    if outside is not None:  # a key outside the run changes the groups' scope: the dict path decides
        assert place({outside: 1, **dict.fromkeys(keys, 0)}) is None
    assert place(dict.fromkeys(keys, 4)) is None  # a stream out of range: the dict path's error


def test_compacting_an_array_plan_is_compacting_its_dict():
    import random

    import numpy as np

    rng = random.Random(3)
    for trial in range(200):
        ids = (0, 1, 2, 3, 5, 7, 9) + ((-1, -4) if trial % 3 == 0 else ())  # counted, or sorted (negatives)
        values = np.array([rng.choice(ids) for _ in range(rng.randint(0, 12))], np.int64)
        want = list(auto.compact(dict(enumerate(values.tolist()))).values())
        assert auto.compact_array(values).tolist() == want, trial
