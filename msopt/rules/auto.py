"""Policy auto (the default): a cost-aware schedule over at most N streams, the best simulated plan among several.

1. The cost model (msopt.simulator.cost) flattens one run of the model into op instances with a time,
   a share of the GPU and output bytes, on the target GPU and batch size of the options.
2. Its own schedules, for k = 2, 4, ... up to N streams: list scheduling in order of the
   longest remaining path (HEFT's upward rank), each kernel going to the stream where it
   would finish first, counting the host's serial kernel launches (which run ahead of the
   GPU except across streams), the in-order queue of each stream, a sync plus a
   device-to-device copy for each input produced on another stream, and the GPU as a shared
   resource (a kernel cannot finish before all work issued so far could have run on the
   whole GPU, so spreading kernels that already fill the GPU gains nothing); and the same
   with whole chains (a path cover) placed instead of single ops.
3. The other rules' plans (chains, embedding, towers, stage, collective) where they apply,
   called directly as the pure functions they are (not through the policy registry).
4. Every candidate goes through the constraints and the simulator (msopt.simulator.simulate), next to
   the one-stream plan (on large runs, the list schedules and the simulations run on a second
   thread while this one makes the constraint groups and the next candidate: msopt.compiled.side_by_side);
   the shortest makespan wins, ties going to fewer streams and fewer syncs. So auto never plans something slower than one stream, and it says when it used
   fewer streams than it was given because more did not pay (the report's notes).
5. Robustness (``choose_robust``): a multi-stream plan is chosen only if it is at least as fast
   as one stream at every corner of the uncertain host constants (msopt.simulator.uncertainty); the
   point-estimate winner that is not robust is passed over, and the notes say so.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np

from msopt.compiled.gc_pause import gc_paused
from msopt.compiled.side_by_side import beside, pool
from msopt.planning.constraints import apply
from msopt.planning.placed_streams import PlacedStreams
from msopt.rules import RuleOptions, RuleResult
from msopt.rules.chains import chain_plan, minimum_chain_plan
from msopt.rules.collective import collective
from msopt.rules.embedding import embedding
from msopt.rules.stage import stage
from msopt.rules.towers import towers
from msopt.simulator.list_schedule import schedule_streams
from msopt.simulator.simulate import simulate_streams, stream_array
from msopt.simulator.task_arrays import task_arrays

# A rule's plan is a dict, or an int array over the run's keys (msopt.graph.tasks.Tasks.distinct): the list schedules' and
# the chains', which would otherwise build a dict of every key of the run per candidate.
RULE_CANDIDATES = {
    "chains": chain_plan,
    "embedding": embedding,
    "towers": towers,
    "stage": stage,
    "collective": collective,
}
# Plans of no policy of their own, tried after the rules' (so a tie keeps the earlier candidate).
EXTRA_CANDIDATES = {"chains over the minimum path cover": minimum_chain_plan}
COST_WEIGHTED = ("chains", "embedding")  # rules also tried with unit work per kernel instead of the cost model's times
# Beyond this many op instances: only one stream and the full-width list schedule, judged unconstrained. The full
# set costs about twice the time on 1M-node synthetic graphs (bench/RESULTS.md), and there finds a plan simulated
# 3.7x over one stream where the reduced set keeps one stream.
LARGE = 1_000_000


def search(view, options: RuleOptions, cost) -> RuleResult:
    """The best simulated plan among list schedules and the other rules' plans, on at most options.streams streams."""
    with gc_paused():
        return _search(view, options, cost)


def _search(view, options, cost):
    options = replace(options, run=cost.tasks)  # every rule plans the run the candidates are simulated on
    streams = options.streams
    task_arrays(cost)  # made once, before the simulations that read them run side by side
    # One thread beside this one (msopt.compiled.side_by_side): the list schedules, then each candidate's simulation while
    # this thread makes the next. A second loop at once would only take this thread's core (a 2-core machine), and
    # each loop holds its own per-task state.
    with pool(len(cost), threads=1) as simulations:
        single = simulations.submit(cost.single_stream_us)  # once per cost model, shared with the report
        kept, judged = _judge(view, options, cost, simulations)
    single = single.result()
    scored = [(round(single, 6), 1, 0, 0, "one stream")]
    for figures, used, label in judged:
        makespan, syncs = (scored[figures][0], scored[figures][2]) if isinstance(figures, int) else figures.result()
        scored.append((makespan, used, syncs, len(scored), label))
    chosen, passed_over, robust = choose_robust(streams, cost, scored, kept.streams)
    makespan, used, _, _, label = chosen
    plan = kept.plan(chosen[3])
    notes = explain(label, used, streams, makespan, single, scored, robust_only=bool(passed_over))
    if passed_over:
        notes.append(passed_over)
    report = {
        "notes": notes,
        "auto": {
            "chosen": label,
            "robust": True,
            "point_estimate_winner_robust": not passed_over,
            "streams_used": used,
            "candidates": [
                {
                    "plan": row[4],
                    "makespan_ms": round(row[0] / 1000, 6),
                    "streams_used": row[1],
                    "syncs": row[2],
                    "robust": robust.get(row[3]),  # None: not checked (simulates slower than the plan chosen)
                }
                for row in scored
            ],
        },
    }
    return RuleResult(plan, report=report, notes=notes)


def _corners_on_one_stream(cost, simulations):
    """Start the host corners' one-stream runs, which choose_robust compares each corner with, on the second thread
    while this one makes the constraint groups (only where a second thread runs them: they may not be needed)."""
    from msopt.simulator.uncertainty import corner_models

    if not beside(len(cost)):
        return
    started = {cost.single_stream_key()}  # _search started that one
    for cm in corner_models(cost):
        key = cm.single_stream_key()  # corners differing in the copy engine alone share one run
        if key not in started:
            started.add(key)
            simulations.submit(cm.single_stream_us)


def _judge(view, options, cost, simulations):
    """(Kept, [(figures, streams used, label)] per candidate in turn): figures is the future (makespan, syncs) of
    its simulation, submitted to ``simulations``, or the index of the earlier candidate placed alike."""
    streams = options.streams
    large = len(cost) > LARGE
    run_keys, _ = cost.tasks.distinct()  # made here before any other thread reads it (the scope, by identity)
    kept = Kept(run_keys, len(cost))
    made = candidates(view, options, cost, large, simulations.submit)  # the list schedules start now
    if streams > 1:
        _corners_on_one_stream(cost, simulations)
    placed_streams = None if large else PlacedStreams(view, cost)  # the constraints' groups reaching the run
    judged = []
    for label, plan in made:
        if isinstance(plan, np.ndarray):  # over the run's keys
            keys, values = run_keys, compact_array(plan)
        else:
            plan = compact(plan)
            keys, values = kept.shared_keys(plan), _values(plan)
        # Judge each plan as it will run: after the constraints (skipped on very large graphs, for time).
        stream_of = None if large or values is None else placed_streams(values, keys, streams)
        if stream_of is None:  # large, or a plan the arrays do not cover (keys outside the run, bad streams)
            plan = as_dict(cost, plan)
            placed = plan if large else apply(view, plan, streams, scope=placed_streams.scope, records=False)[0]
            stream_of = stream_array(cost, placed, streams)
            values = np.fromiter(plan.values(), np.int64, len(plan)) if values is None else values
        digest = _digest(stream_of)
        same = kept.placed_alike(stream_of, digest)  # an earlier candidate placed every task alike: its figures
        figures = simulations.submit(_figures, cost, stream_of, streams) if same is None else same
        judged.append((figures, int(np.count_nonzero(np.bincount(stream_of, minlength=1))) or 1, label))
        kept.add(keys, values, stream_of, digest)
    return kept, judged


def _figures(cost, stream_of, streams):
    """(makespan rounded to 1e-6 us, syncs) of one candidate's simulation."""
    result = simulate_streams(cost, stream_of, streams, waits=False)
    return round(result.makespan_us, 6), result.syncs


def candidates(view, options, cost, large, submit=None):
    """(label, raw plan) of every candidate, one at a time (a plan is judged and packed before the next is made).
    The list schedules come first; given ``submit`` (an executor's), they are all started now, one after another
    on another thread (they read no constraint groups: made side by side with the caller's), else each is made
    when asked for."""
    streams = options.streams
    if streams < 2 or not len(cost):
        return iter(())
    widths = [streams] if large else sorted({min(1 << i, streams) for i in range(1, 11)} | {streams})
    schedules = [
        (f"{'chain ' if chained else ''}list schedule on {k} streams", k, chained)
        for k in widths
        for chained in ((False,) if large else (False, True))
    ]

    def scheduled():
        for _, k, chained in schedules:
            yield schedule_streams(cost, k, chained=chained, by_rank=not large)

    made = scheduled() if submit is None else _when_done(submit(lambda: list(scheduled())))
    return _candidates(view, options, cost, large, zip((label for label, _, _ in schedules), made))


def _when_done(future):
    """The items of ``future``'s result, waited for when the first is asked for."""
    yield from future.result()


def _candidates(view, options, cost, large, schedules):
    yield from schedules
    times = cost.node_times()  # the rules' weights, once per search
    for name in () if large else RULE_CANDIDATES:
        plan = run_rule(name, view, options, times)
        if len(plan):
            yield f"policy {name}", plan
        if name in COST_WEIGHTED:
            plan = run_rule(name, view, options, None)
            if len(plan):
                yield f"policy {name} with unit costs", plan
    for name in () if large else EXTRA_CANDIDATES:
        plan = run_rule(name, view, options, times)
        if len(plan):
            yield name, plan


class Kept:
    """Every candidate's raw plan and its tasks' streams as simulated, packed: a plan's keys as a tuple (shared
    with an earlier plan of the same keys in the same order) and its streams as a small integer array. Kept as
    dicts, the candidates of a million-op run held 1.4 GB (a raw and a constrained dict each); packed, a few MB
    each beside one shared tuple of keys. The first, the one-stream plan, names no key."""

    def __init__(self, run_keys, tasks):
        self.keys, self.values, self.streams = [], [], []
        self._distinct = [run_keys]  # the distinct key tuples: the run's first, as most plans name its keys
        self._placements = {}  # digest of a candidate's task streams -> the candidates placed so
        self.add((), np.zeros(0, np.int64), np.zeros(tasks, np.uint8))

    def placed_alike(self, stream_of, digest):
        """The first candidate (not the one-stream plan, simulated on one stream) whose tasks' streams are
        ``stream_of``'s (``digest``: its ``_digest``), or None. Rules often agree (a weighted and a unit-cost fold,
        two widths of one schedule): their simulations would be the same."""
        for index in self._placements.get(digest, ()):
            if index and np.array_equal(self.streams[index], stream_of):
                return index
        return None

    def shared_keys(self, plan):
        """``tuple(plan)``: the one kept if an earlier plan had the same keys in the same order."""
        keys = tuple(plan)
        same = next((kept for kept in self._distinct if kept == keys), None)
        if same is None:
            self._distinct.append(keys)
        return keys if same is None else same

    def add(self, keys, values, stream_of, digest=None):
        """Keep a raw plan (its ``shared_keys`` and streams, an array) and its tasks' streams as simulated
        (``digest``: their ``_digest``, if known)."""
        digest = _digest(stream_of) if digest is None else digest
        self._placements.setdefault(digest, []).append(len(self.streams))
        self.keys.append(keys)
        self.values.append(_small(values))
        self.streams.append(_small(stream_of))

    def plan(self, index):
        """The raw plan of candidate ``index`` as it was given (the same keys, order and streams)."""
        return dict(zip(self.keys[index], self.values[index].tolist()))


def as_dict(cost, plan):
    """A candidate of ``cost``'s run as a dict, whichever form it came in (``candidates``)."""
    return dict(zip(cost.tasks.distinct()[0], plan.tolist())) if isinstance(plan, np.ndarray) else plan


def _values(plan):
    """A dict plan's streams as an int64 array, or None if they are not all integers (the dict path judges it)."""
    try:
        return np.fromiter(plan.values(), np.int64, len(plan))
    except (TypeError, ValueError, OverflowError):
        return None


def _digest(stream_of):
    """A digest of a task stream array, whatever its integer type."""
    return hashlib.blake2b(np.ascontiguousarray(stream_of, np.int64).data, digest_size=16).digest()


def _small(values):
    """Integer ``values`` (an array) in the smallest type holding them."""
    if not len(values) or values.min() < 0:
        return values
    return values.astype(np.min_scalar_type(int(values.max())))


def choose_robust(streams, cost, scored, placed_streams):
    """(the chosen row of ``scored``, a note or "", {row id: robust}): the best point estimate among the plans
    at least as fast as one stream at every corner of the host box (msopt.simulator.uncertainty; a one-stream plan
    always is). ``placed_streams[row[3]]`` is each task's stream in ``row``'s plan as simulated (after the
    constraints)."""
    from msopt.simulator.uncertainty import TOLERANCE, corner_rows, describe, speedups

    single = cost.single_stream_us()
    passed = None
    robust = {}
    order = None  # after a plan passed over: its slowest corner first
    for row in sorted(scored):
        point = single / row[0] if row[0] > 0 else 1.0
        robust[row[3]] = True
        if row[1] == 1:
            chosen = f"one stream (simulated {point:.3g}x)" if row[4] == "one stream" else f"{row[4]} (one stream)"
            break
        if passed is None:
            corners = speedups(corner_rows(cost, placed_streams[row[3]], streams))
        else:  # only the first plan passed over has its range in the note: the others stop at a slower corner
            corners = []
            for corner in corner_rows(cost, placed_streams[row[3]], streams, order):
                corners += speedups([corner])
                if corners[-1] < 1.0 - TOLERANCE:
                    break
        ups = corners + [point]
        if min(ups) >= 1.0 - TOLERANCE:
            chosen = f"{row[4]}, {describe(point, (min(ups), max(ups)))}"
            break
        robust[row[3]] = False
        if passed is None:
            passed = f"{row[4]}: {describe(point, (min(ups), max(ups)))}"
            order = sorted(range(len(corners)), key=corners.__getitem__)
    if passed is None:
        return row, "", robust
    note = (
        f"auto passed over the plan best at the point estimate, the {passed}, as it is slower than one stream "
        f"under some host assumptions; it chose the {chosen}"
    )
    return row, note, robust


def run_rule(name, view, options, node_costs):
    """Another rule's raw plan (before the constraints): its ops weighted by ``node_costs`` ({key: time}), or one
    unit each if None."""
    rule = RULE_CANDIDATES.get(name) or EXTRA_CANDIDATES[name]
    result = rule(view, replace(options, node_costs=node_costs))
    return result.partition if isinstance(result, RuleResult) else result


def compact(plan):
    """Close the gaps in the stream numbers, keeping their order (stream 0, where unassigned nodes run, stays 0).

    Every candidate is compacted before it is judged, so the plan returned is the one simulated.
    """
    new = {s: i for i, s in enumerate(sorted(set(plan.values()) | {0}))}
    if all(s == i for s, i in new.items()):  # no gap: the plan as it is
        return plan
    return {key: new[s] for key, s in plan.items()}


def compact_array(values):
    """``compact`` of a plan given as an int array of streams."""
    if len(values) and values.min() >= 0:  # stream ids: counted, not sorted
        counts = np.bincount(values)
        counts[0] += 1  # stream 0 stays
        used = np.flatnonzero(counts)
    else:
        used = np.union1d(values, [0])
    if used[0] == 0 and used[-1] == len(used) - 1:  # no gap (the streams are 0 ... k, ascending and distinct)
        return values
    return np.searchsorted(used, values).astype(np.int64)


def explain(label, used, streams, makespan, single, scored, robust_only=False):
    """One-line notes for the report: what was chosen and why, and when fewer streams were used."""
    ms, one = makespan / 1000, single / 1000
    notes = [
        f"auto chose the {label}: simulated makespan {ms:.4g} ms vs {one:.4g} ms on one stream"
        f" (speedup {one / ms if ms else 1:.3g}x), {len(scored)} candidates simulated"
    ]
    if used < streams:
        widest = max(row[1] for row in scored)
        why = (
            "parallelism does not pay on this model"
            if used == 1
            else "more streams did not shorten the simulated makespan"
        ) + (" under every host assumption" if robust_only else "")
        detail = ""
        if widest > used:
            best_wide = min(row[0] for row in scored if row[1] == widest)
            detail = f"; the best plan using {widest} streams simulates {best_wide / 1000:.4g} ms"
        notes.append(f"auto uses {used} of {streams} streams: {why}{detail}")
    return notes
