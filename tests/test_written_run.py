"""The written model's run derived in memory (msopt.planning.written_run) against loading, flattening and costing the
written model again: the same tasks in the same order, the same edges and streams, the same simulated figures."""

import json
from dataclasses import replace

import pytest
from conftest import SAMPLES

from msopt import emit
from msopt.emit import copy_name
from msopt.graph.flat import signature_roots
from msopt.load import open_model
from msopt.planning.const_copies import const_copies
from msopt.planning.plan import ManualOptions, PlanOptions, build_cost_model, make_plan
from msopt.planning.written_run import as_written
from msopt.simulator.simulate import simulate, streams_of
from msopt.simulator.uncertainty import ranges


def _copying(plan, view):
    """``plan`` (made without Const handling) with a copy of every Const read on another stream, none moved."""
    return replace(plan, const_copies=const_copies(view, plan.partition)[1])


def _figures(view, partition, streams, cost_model):
    result = simulate(view, partition, streams, cost_model)
    return {**result.report(), **ranges(view, partition, streams, cost_model, result)}


@pytest.mark.parametrize(
    "name, streams, policy",
    [
        ("deepfm_tf1", 4, "chains"),
        ("deepfm_tf1", 2, None),
        ("deepfm_tf2", 4, "chains"),
        ("deepfm_tf2", 4, "towers"),
        ("stage_tf1", 4, "chains"),
        ("stage_tf2", 4, "chains"),
        ("towers_tf1", 4, "chains"),
    ],
)
def test_the_run_as_written_is_the_written_model_s_run(tmp_path, name, streams, policy):
    loaded, view = open_model(str(SAMPLES / name))
    options = PlanOptions(streams=streams, policy=policy)
    cost_model = build_cost_model(view, loaded, options.cost)
    plan = _copying(make_plan(view, replace(options, const_dup=False), loaded, cost_model), view)
    assert plan.const_copies, "the case must copy constants"
    emit.write(loaded, plan.partition, tmp_path / "m", const_copies=plan.const_copies)
    loaded_out, view_out = open_model(str(tmp_path / "m"))
    cost_out = build_cost_model(view_out, loaded_out, options.cost)
    as_read = replace(options, policy="none", manual=ManualOptions())
    partition_out = make_plan(view_out, as_read, loaded_out, cost_out).partition

    roots = signature_roots(view, loaded, cost_model.signature)[1]
    run, partition = as_written(cost_model, plan.partition, plan.const_copies, roots)

    assert run.tasks.key == cost_out.tasks.key  # the same op instances in the same order
    assert run.tasks.instance == cost_out.tasks.instance
    assert run.tasks.inputs == cost_out.tasks.inputs and run.tasks.control == cost_out.tasks.control
    assert streams_of(run, partition) == streams_of(cost_out, partition_out)
    assert (run.duration, run.kernel, run.neutral, run.out_bytes) == (
        cost_out.duration,
        cost_out.kernel,
        cost_out.neutral,
        cost_out.out_bytes,
    )
    assert _figures(view, partition, streams, run) == _figures(view_out, partition_out, streams, cost_out)


def test_no_copies_is_the_plan_s_own_run():
    loaded, view = open_model(str(SAMPLES / "deepfm_tf2"))
    cost_model = build_cost_model(view, loaded, PlanOptions().cost)
    partition = {key: 1 for key in cost_model.tasks.key}
    assert as_written(cost_model, partition, {}) == (cost_model, partition)


def test_a_measured_constant_s_copies_are_costed_as_the_written_model_costs_them(tmp_path):
    """A costs file naming a copied Const times the original only: the written model's copies have other
    names, so they launch nothing, as in the written model loaded and costed again."""
    loaded, view = open_model(str(SAMPLES / "deepfm_tf2"))
    options = PlanOptions(streams=4, policy="chains")
    plan = _copying(
        make_plan(view, replace(options, const_dup=False), loaded, build_cost_model(view, loaded, options.cost)), view
    )
    measured = {key: 7.5 for key in list(plan.const_copies)[:3]}
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"unit": "us", "ops": measured}))
    options = replace(options, cost=replace(options.cost, costs=str(costs)))
    cost_model = build_cost_model(view, loaded, options.cost)
    plan = _copying(make_plan(view, replace(options, const_dup=False), loaded, cost_model), view)
    emit.write(loaded, plan.partition, tmp_path / "m", const_copies=plan.const_copies)
    loaded_out, view_out = open_model(str(tmp_path / "m"))
    cost_out = build_cost_model(view_out, loaded_out, options.cost)
    partition_out = make_plan(view_out, replace(options, policy="none", manual=ManualOptions()), loaded_out, cost_out)
    roots = signature_roots(view, loaded, cost_model.signature)[1]
    run, partition = as_written(cost_model, plan.partition, plan.const_copies, roots)
    assert run.tasks.key == cost_out.tasks.key
    assert (run.duration, run.kernel) == (cost_out.duration, cost_out.kernel)
    kernel = dict(zip(run.tasks.key, run.kernel))
    assert all(kernel[key] for key in measured)  # the originals stay measured kernels
    assert not any(kernel.get(copy_name(key, s)) for key in measured for s in plan.const_copies[key])
    figures = _figures(view, partition, 4, run)
    assert figures == _figures(view_out, partition_out.partition, 4, cost_out)


@pytest.mark.parametrize(
    "name, streams, policy, moved",
    [("deepfm_tf2", 4, "chains", True), ("stage_tf2", 4, "chains", True), ("deepfm_tf1", 4, "chains", False)],
)
def test_the_plan_s_run_as_written_with_consts_moved_or_copied(tmp_path, name, streams, policy, moved):
    """make_plan moves a Const read on one other stream there when the run as written then simulates no longer
    than with a copy of each such Const (deepfm_tf2, stage_tf2), else copies them all (deepfm_tf1 on 4 streams, where
    the copies, appended to their body, launch later than the moved originals would): the run and figures it
    keeps are the written model's, and never longer than the copies'."""
    loaded, view = open_model(str(SAMPLES / name))
    options = PlanOptions(streams=streams, policy=policy, cost=replace(PlanOptions().cost, target="h100"))
    cost_model = build_cost_model(view, loaded, options.cost)
    plan = make_plan(view, options, loaded, cost_model)
    copying = _copying(make_plan(view, replace(options, const_dup=False), loaded, cost_model), view)
    assert bool(plan.report["consts_moved"]) == moved
    assert plan.const_copies == (copying.const_copies if not moved else {})  # these cases read each Const on one stream
    run, partition, simulated = plan.written
    for key, stream in copying.const_copies.items():
        assert (partition[key] == stream[0]) == moved  # a moved Const: on its readers' stream
    emit.write(loaded, plan.partition, tmp_path / "m", const_copies=plan.const_copies)
    loaded_out, view_out = open_model(str(tmp_path / "m"))
    cost_out = build_cost_model(view_out, loaded_out, options.cost)
    partition_out = make_plan(view_out, replace(options, policy="none", manual=ManualOptions()), loaded_out, cost_out)
    assert run.tasks.key == cost_out.tasks.key
    assert streams_of(run, partition) == streams_of(cost_out, partition_out.partition)
    assert simulated.makespan_us == simulate(view_out, partition_out.partition, streams, cost_out).makespan_us
    roots = signature_roots(view, loaded, cost_model.signature)[1]
    copies_run, copies_partition = as_written(cost_model, copying.partition, copying.const_copies, roots)
    assert simulated.makespan_us <= simulate(view, copies_partition, streams, copies_run).makespan_us
