"""The candidate plans: one stream, the model's own _stream_id plan, auto's best plan at each stream count,
each applicable policy at 2..N streams and the user's rules files; all planned by msopt.planning.plan.make_plan from the measured costs and simulated."""

from __future__ import annotations

from dataclasses import dataclass, field

from msopt.errors import InputError
from msopt.planning.plan import CostOptions, ManualOptions, PlanOptions, build_cost_model, make_plan
from msopt.rules.auto import RULE_CANDIDATES
from msopt.simulator.simulate import simulate

ONE_STREAM = "one stream"


@dataclass
class Candidate:
    """One plan to measure: its partition (node key -> stream), Const copies and simulated time."""

    label: str
    kind: str  # "one stream", "model" (its own _stream_id), "auto", "policy" or "rules"
    streams: int  # streams the plan was made for
    partition: dict[str, int] = field(default_factory=dict)
    const_copies: dict[str, list[int]] = field(default_factory=dict)
    simulated_us: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def streams_used(self):
        return len(set(self.partition.values()) | {0})

    def identity(self):
        return (frozenset(self.partition.items()), frozenset((k, tuple(v)) for k, v in self.const_copies.items()))


def plan_candidates(view, model, streams, cost: CostOptions, rules_files=(), limit=10):
    """(candidates to measure, [{label, why}] plans left out), simulated with the cost model of ``cost``.

    One stream, the model's own plan (when its nodes carry _stream_id) and every rules file always come first; the other plans are deduplicated (the same
    partition from two policies is measured once, under the first label) and, beyond ``limit``,
    the ones simulated slowest are left out.
    """
    cost_model = build_cost_model(view, model, cost)
    one = Candidate(ONE_STREAM, ONE_STREAM, 1, simulated_us=cost_model.single_stream_us())
    fixed, others, skipped = [one], [], []
    if any(node.stream is not None for node in view.real_nodes()):  # DeepRec's tf.stream or msopt.stream
        label = "the model's own _stream_id"
        try:
            own = _candidate(
                label, "model", view, model, PlanOptions(streams=streams, policy="none", cost=cost), cost_model
            )
        except InputError as e:
            skipped.append({"label": label, "why": f"does not fit --streams {streams}: {e}"})
        else:
            fixed.append(own)
    for path in rules_files:
        options = PlanOptions(streams=streams, policy="manual", cost=cost, manual=ManualOptions(path))
        fixed.append(_candidate(f"rules {path}", "rules", view, model, options, cost_model))
    for k in range(2, streams + 1):
        options = PlanOptions(streams=k, policy="auto", cost=cost)
        others.append(_candidate(f"auto on {k} streams", "auto", view, model, options, cost_model))
        for name in RULE_CANDIDATES:
            label = f"policy {name} on {k} streams"
            try:
                planned = _candidate(
                    label, "policy", view, model, PlanOptions(streams=k, policy=name, cost=cost), cost_model
                )
            except InputError as e:
                skipped.append({"label": label, "why": f"does not apply: {e}"})
                continue
            others.append(planned)
    seen = {c.identity(): c.label for c in fixed}
    kept = []
    for c in others:
        if c.streams_used == 1:
            skipped.append({"label": c.label, "why": "puts every op on one stream (the same as one stream)"})
        elif c.identity() in seen:
            skipped.append({"label": c.label, "why": f"the same plan as {seen[c.identity()]}"})
        else:
            seen[c.identity()] = c.label
            kept.append(c)
    kept.sort(key=lambda c: c.simulated_us)
    room = max(limit - len(fixed), 0)
    for c in kept[room:]:
        skipped.append(
            {"label": c.label, "why": f"over --max-candidates {limit}, simulated slower than those measured"}
        )
    return fixed + kept[:room], skipped, cost_model


def _candidate(label, kind, view, model, options, cost_model):
    result = make_plan(view, options, model, cost_model)
    simulated = simulate(view, result.partition, options.streams, cost_model)
    return Candidate(
        label,
        kind,
        options.streams,
        dict(result.partition),
        dict(result.const_copies),
        simulated.makespan_us,
        list(result.notes),
    )
