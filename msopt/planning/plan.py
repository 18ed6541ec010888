"""The plan layer: typed options in, a plan out (rule or auto search, constraints, Const copies, cost model).

`msopt partition`, `simulate`, `visualize` and the Python API all plan through `make_plan`, so
the same options give the same plan whichever command asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from msopt.errors import InputError
from msopt.rules import (
    AUTO,
    POLICIES,
    CollectiveOptions,
    ManualOptions,
    RuleOptions,
    StageOptions,
    check_policy,
    run_rule,
)

__all__ = [
    "CollectiveOptions",
    "CostOptions",
    "HostOptions",
    "ManualOptions",
    "PlanOptions",
    "PlanResult",
    "StageOptions",
    "build_cost_model",
    "default_policy",
    "make_plan",
    "resolve_policy",
]


@dataclass(frozen=True)
class HostOptions:
    """The host model's settings: a measured host profile and the copy-stream configuration simulated."""

    profile: str | None = None  # JSON file of measured host constants (msopt.simulator.host_model.load_host_profile)
    merge_copy_streams: bool = False  # copies on the compute streams (TensorFlow's stream_merge_options)


@dataclass(frozen=True)
class CostOptions:
    """The cost model's settings: target GPU, size of the unknown batch dimension, measured costs, signature."""

    target: str | None = None  # default: h100
    batch_size: int = 1
    costs: str | None = None  # JSON file of measured per-op times
    signature: str | None = None  # default: serving_default, else the first
    launch_threads: int | None = None  # inter-op threads launching kernels (default: the target's host's cores)
    host: HostOptions = field(default_factory=HostOptions)


@dataclass(frozen=True)
class PlanOptions:
    """Everything that decides a plan, one dataclass per concern."""

    streams: int = 4
    policy: str | None = None  # None: auto (or manual when manual.rules is given)
    cost: CostOptions = field(default_factory=CostOptions)
    manual: ManualOptions = field(default_factory=ManualOptions)
    stage: StageOptions = field(default_factory=StageOptions)
    collective: CollectiveOptions = field(default_factory=CollectiveOptions)
    const_dup: bool = True  # copy Const nodes into each consuming stream instead of copying their value


@dataclass
class PlanResult:
    """A plan: the final partition and how it came about."""

    policy: str
    streams: int
    partition: dict[str, int]
    merges: list[dict] = field(default_factory=list)  # each change the placement constraints made
    notes: list[str] = field(default_factory=list)  # sentences for the user (auto: what it chose, why fewer streams)
    report: dict = field(default_factory=dict)  # entries for the partition report (manual: rules matched; auto)
    const_copies: dict[str, list[int]] = field(default_factory=dict)  # Const node -> streams getting a copy
    cost_model: object = None  # the CostModel the plan was judged with, if any
    written: tuple | None = None  # (cost model, partition, simulate.Result) of the run as written, if worked out


def default_policy() -> str:
    return AUTO if AUTO in POLICIES else "none"


def resolve_policy(policy: str | None, rules: str | None, default: str | None = None) -> str:
    """The policy to run: manual when a rules file is given, else ``policy``, else ``default`` (auto)."""
    if rules and policy and policy != "manual":
        raise InputError(f"--rules is read by --policy manual, not by --policy {policy}")
    return policy or ("manual" if rules else default or default_policy())


def build_cost_model(view, model, cost: CostOptions):
    """The cost model the commands share (bad targets, batch sizes and costs files are InputErrors)."""
    from msopt.simulator.cost import DEFAULT_TARGET, TARGETS, CostModel
    from msopt.simulator.host_model import load_host_profile, ranges_for

    if cost.batch_size is not None and cost.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {cost.batch_size}")
    name = cost.target or DEFAULT_TARGET
    if name not in TARGETS:
        raise InputError(f"unknown target '{name}'; choose one of: {', '.join(TARGETS)}")
    profile = load_host_profile(cost.host.profile) if cost.host.profile else None
    host: dict = dict(profile.values) if profile else {}
    if cost.launch_threads is not None:
        host["launch_threads"] = cost.launch_threads
    if cost.host.merge_copy_streams:
        host["merge_copy_streams"] = True
    target = replace(TARGETS[name], **host)
    cost_model = CostModel(
        view, model, target=target, batch_size=cost.batch_size or 1, costs=cost.costs, signature=cost.signature
    )
    cost_model.host_ranges = ranges_for(profile)
    return cost_model


def rule_options(options: PlanOptions, cost_model=None, run=None) -> RuleOptions:
    """What the rules read: the plan options' rule settings, the run to plan (the cost model's if there is
    one, else ``run``) and the cost model's per-op times, if any."""
    return RuleOptions(
        streams=options.streams,
        node_costs=cost_model.node_times() if cost_model is not None else None,
        run=cost_model.tasks if cost_model is not None else run,
        manual=options.manual,
        stage=options.stage,
        collective=options.collective,
    )


def make_plan(view, options: PlanOptions, model=None, cost_model=None) -> PlanResult:
    """Run the policy (a rule, or the auto search), check its stream ids, enforce the placement constraints.

    ``cost_model`` weights the rules and scores the auto search; auto builds one from
    ``options.cost`` (and ``model``) when none is given, other rules then count one unit per kernel.
    """
    from msopt.compiled.gc_pause import gc_paused

    name = resolve_policy(options.policy, options.manual.rules)
    check_policy(name)
    if name == AUTO and cost_model is None:
        cost_model = build_cost_model(view, model, options.cost)
    with gc_paused():  # a full collection over a large model's objects costs more than these passes' garbage
        from msopt.planning.constraints import apply, linked_keys
        from msopt.planning.partition import check_range

        if name == AUTO:
            from msopt.rules.auto import search

            raw = search(view, rule_options(options), cost_model)
        else:
            run = None
            if cost_model is None and model is not None:  # the rules plan the signature's run, as auto does
                from msopt.graph.flat import flat_run

                run = flat_run(view, model, options.cost.signature)[1]
            raw = run_rule(name, view, rule_options(options, cost_model, run))
        check_range(raw.partition, options.streams, *([f"policy {name}"] if name != "none" else []))
        scope = cost_model.tasks.key_set() if name == AUTO else None  # auto's candidates had the run's
        partition, merges = apply(view, raw.partition, options.streams, raw, scope)
        moves, copies, written = {}, {}, None
        if options.const_dup:  # a Const that a rule placed, or that is linked, stays where it is
            linked = None if name == "manual" or cost_model is None else lambda: linked_keys(view, raw.partition, scope)
            moves, copies, written = _place_consts(view, partition, linked, model, cost_model, options.streams)
            partition.update(moves)
    report = {**raw.report, "consts_moved": len(moves)} if options.const_dup else dict(raw.report)
    return PlanResult(name, options.streams, partition, merges, list(raw.notes), report, copies, cost_model, written)


def _place_consts(view, partition, linked, model, cost_model, streams):
    """(moves, copies, (cost model, partition, Result) of the run as written, or None): the Consts read on other
    streams (msopt.planning.const_copies) move where they may when the model as written then simulates no longer than with
    every one of them copied instead, else each is copied. Copies are appended to their body, moved Consts keep
    their place: the ready ops' order can favour either, so the two runs as written are compared. ``linked()``
    gives the keys a constraint links, which never move (asked only of a model with Consts); None: no moves."""
    from msopt.planning.const_copies import const_copies

    if not view.of_ops("Const".__eq__):
        return {}, {}, None
    moves, copies = const_copies(view, partition, linked and linked())
    if not moves:
        return moves, copies, None
    from msopt.planning.written_run import simulated_as_written

    kept = {key: value for key, value in copies.items() if key not in moves}
    moved = simulated_as_written(view, model, cost_model, {**partition, **moves}, kept, streams)
    copied = simulated_as_written(view, model, cost_model, partition, copies, streams)
    if moved[2].makespan_us <= copied[2].makespan_us:
        return moves, kept, moved
    return {}, copies, copied


def plan_rule(name: str, view, streams: int, **rule_settings) -> tuple[dict[str, int], list[dict]]:
    """(partition, merges) of rule ``name`` on ``streams`` streams, no cost model: for the runner and benchmarks."""
    result = make_plan(view, PlanOptions(streams=streams, policy=name, const_dup=False, **rule_settings))
    return result.partition, result.merges
