"""Policy auto (the default): a cost-aware schedule over at most N streams, the best simulated plan among several.

1. The cost model (msopt.cost) flattens one run of the model into op instances with a time,
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
4. Every candidate goes through the constraints and the simulator (msopt.simulate), next to
   the one-stream plan; the shortest makespan wins, ties going to fewer streams and fewer
   syncs. So auto never plans something slower than one stream, and it says when it used
   fewer streams than it was given because more did not pay (the report's notes).
5. Robustness (``choose_robust``): a multi-stream plan is chosen only if it is at least as fast
   as one stream at every corner of the uncertain host constants (msopt.uncertainty); the
   point-estimate winner that is not robust is passed over, and the notes say so.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from msopt.constraints import apply
from msopt.gc_pause import gc_paused
from msopt.order import longest_to_sink
from msopt.rules import RuleOptions, RuleResult
from msopt.rules.chains import chains, greedy_path_cover, minimum_chains
from msopt.rules.collective import collective
from msopt.rules.embedding import embedding
from msopt.rules.stage import stage
from msopt.rules.towers import towers
from msopt.rules.walk import Dag
from msopt.simulate import simulate

RULE_CANDIDATES = {"chains": chains, "embedding": embedding, "towers": towers, "stage": stage, "collective": collective}
# Plans of no policy of their own, tried after the rules' (so a tie keeps the earlier candidate).
EXTRA_CANDIDATES = {"chains over the minimum path cover": minimum_chains}
COST_WEIGHTED = ("chains", "embedding")  # rules also tried with unit work per kernel instead of the cost model's times
LARGE = 50_000  # beyond this many op instances: only one stream and the full-width list schedule, judged unconstrained


def search(view, options: RuleOptions, cost) -> RuleResult:
    """The best simulated plan among list schedules and the other rules' plans, on at most options.streams streams."""
    with gc_paused():
        return _search(view, options, cost)


def _search(view, options, cost):
    options = replace(options, run=cost.tasks)  # every rule plans the run the candidates are simulated on
    streams = options.streams
    large = len(cost) > LARGE
    candidates = []
    if streams > 1 and len(cost):
        widths = [streams] if large else sorted({min(1 << i, streams) for i in range(1, 11)} | {streams})
        for k in widths:
            candidates.append((f"list schedule on {k} streams", schedule(cost, k, by_rank=not large)))
            if not large:
                candidates.append((f"chain list schedule on {k} streams", schedule(cost, k, chained=True)))
        for name in () if large else RULE_CANDIDATES:
            plan = run_rule(name, view, options, cost)
            if plan:
                candidates.append((f"policy {name}", plan))
            if name in COST_WEIGHTED:
                plan = run_rule(name, view, options, None)
                if plan:
                    candidates.append((f"policy {name} with unit costs", plan))
        for name in () if large else EXTRA_CANDIDATES:
            plan = run_rule(name, view, options, cost)
            if plan:
                candidates.append((name, plan))
    single = cost.single_stream_us()  # simulated once per cost model, shared with the report
    scored = [(round(single, 6), 1, 0, 0, "one stream", {})]
    placed_plans = [{}]
    for label, plan in candidates:
        plan = compact(plan)
        # Judge each plan as it will run: after the constraints (skipped on very large graphs, for time).
        placed = plan if large else apply(view, plan, streams)[0]
        result = simulate(view, placed, streams, cost)
        used = len(set(result.stream_of)) or 1
        scored.append((round(result.makespan_us, 6), used, result.syncs, len(scored), label, plan))
        placed_plans.append(placed)
    chosen, passed_over, robust = choose_robust(view, streams, cost, scored, placed_plans)
    makespan, used, _, _, label, plan = chosen
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


def choose_robust(view, streams, cost, scored, placed_plans):
    """(the chosen row of ``scored``, a note or "", {row id: robust}): the best point estimate among the plans
    at least as fast as one stream at every corner of the host box (msopt.uncertainty; a one-stream plan
    always is). ``placed_plans[row[3]]`` is the plan of ``row`` as simulated (after the constraints)."""
    from msopt.uncertainty import corner_figures, describe, speedups

    single = cost.single_stream_us()
    passed = None
    robust = {}
    for row in sorted(scored):
        point = single / row[0] if row[0] > 0 else 1.0
        robust[row[3]] = True
        if row[1] == 1:
            chosen = f"one stream (simulated {point:.3g}x)" if row[4] == "one stream" else f"{row[4]} (one stream)"
            break
        ups = speedups(corner_figures(view, placed_plans[row[3]], streams, cost)) + [point]
        if min(ups) >= 1.0 - 1e-9:
            chosen = f"{row[4]}, {describe(point, (min(ups), max(ups)))}"
            break
        robust[row[3]] = False
        if passed is None:
            passed = f"{row[4]}: {describe(point, (min(ups), max(ups)))}"
    if passed is None:
        return row, "", robust
    note = (
        f"auto passed over the plan best at the point estimate, the {passed}, as it is slower than one stream "
        f"under some host assumptions; it chose the {chosen}"
    )
    return row, note, robust


def run_rule(name, view, options, cost):
    """Another rule's raw plan (before the constraints): its ops weighted by ``cost``, or one unit each if None."""
    node_costs = cost.node_times() if cost is not None else None
    rule = RULE_CANDIDATES.get(name) or EXTRA_CANDIDATES[name]
    result = rule(view, replace(options, node_costs=node_costs))
    return result.partition if isinstance(result, RuleResult) else result


def schedule(cost, streams, chained=False, by_rank=True):
    """{node key: stream} from list scheduling the cost model's op instances on ``streams`` streams.

    With ``chained``, the ops are first cut into chains (a path cover, as policy chains does)
    and only a chain's first op chooses a stream; the rest of the chain follows it. Op by op,
    an early choice that saves a microsecond can pin a whole branch to a busy stream; chains
    keep branches whole, so the two variants win on different graphs. Without ``by_rank`` the
    ops are taken in the cost model's order (TensorFlow's ready order) instead of by priority:
    no heap, for very large graphs.
    """
    t, target = cost.tasks, cost.target
    n = len(t.key)
    preds = [list(dict.fromkeys([src for src, _ in t.inputs[i]] + t.control[i])) for i in range(n)]
    succs = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    duration, share, kernel, neutral = cost.duration, cost.share, cost.kernel, cost.neutral
    chain_of = chain_stream = None
    if chained:
        dag = Dag(t.key, preds, succs, t)
        chain_of = greedy_path_cover(dag)
        chain_stream = {}
        chain_work = {}
        for i, c in enumerate(chain_of):
            chain_work[c] = chain_work.get(c, 0.0) + duration[i] + (target.launch_us if kernel[i] else 0.0)
        committed = [0.0] * streams  # when each stream would be done with the chains given to it so far
    sync = target.sync_us + target.copy_latency_us
    per_byte = 1.0 / (target.copy_gbs * 1e3)  # microseconds per byte
    out_bytes = [max(b) if b else 0 for b in cost.out_bytes]
    # Tasks are numbered in a topological order.
    rank = longest_to_sink(range(n), succs, duration) if by_rank else None
    finish = [0.0] * n
    issued = [0.0] * n  # when the host launched the op (or passed it through)
    stream_of = [0] * n
    free = [k * target.partition_overhead_us for k in range(streams)]  # each further executor starts later
    host = 0.0
    launch = target.launch_us
    work = 0.0  # GPU-microseconds issued so far: nothing finishes before work / 1 GPU
    all_streams = range(streams)
    for i in _priority_order(preds, succs, rank) if by_rank else range(n):
        ps = preds[i]
        if chained:
            c = chain_of[i]
            if c not in chain_stream:  # a chain's first op: the stream that would finish the whole chain first
                chain_stream[c] = _chain_home(ps, finish, stream_of, neutral, committed, chain_work[c], sync)
                committed[chain_stream[c]] = max(committed[chain_stream[c]], finish_of(ps, finish)) + chain_work[c]
            choices = (chain_stream[c],)
        else:
            linked = [stream_of[p] for p in ps if not neutral[p]]
            idle = min(all_streams, key=free.__getitem__)
            choices = set(linked)
            choices.add(idle)
        best = None
        for s in choices:
            # The host may launch i once a same-stream input is launched (the stream keeps the order),
            # but must see a cross-stream input done on the device, synced and copied.
            host_ready = device_ready = 0.0
            for p in ps:
                if neutral[p] or stream_of[p] == s:
                    if issued[p] > host_ready:
                        host_ready = issued[p]
                    if finish[p] > device_ready:
                        device_ready = finish[p]
                else:
                    arrive = finish[p] + sync + out_bytes[p] * per_byte
                    if arrive > host_ready:
                        host_ready = arrive
            if kernel[i]:
                launched = (host if host > host_ready else host_ready) + launch
                end = max(free[s], launched, device_ready) + duration[i]
                if work + duration[i] * share[i] > end:
                    end = work + duration[i] * share[i]
            else:
                launched, end = host_ready, max(host_ready, device_ready)
            key = (end, not any(stream_of[p] == s for p in ps), s)
            if best is None or key < best[0]:
                best = (key, s, end, launched)
        _, s, end, launched = best
        stream_of[i], finish[i], issued[i] = s, end, launched
        if kernel[i]:
            host = launched
            free[s] = end
            work += duration[i] * share[i]
    plan = {}
    for i, key in enumerate(t.key):
        plan.setdefault(key, stream_of[i])
    return plan


def _priority_order(preds, succs, rank):
    """A topological order that always takes the ready op with the longest path still ahead of it."""
    waiting = [len(ps) for ps in preds]
    queue = [(-rank[i], i) for i in range(len(preds)) if waiting[i] == 0]
    heapq.heapify(queue)
    pop, push = heapq.heappop, heapq.heappush
    while queue:
        i = pop(queue)[1]
        yield i
        for w in succs[i]:
            waiting[w] -= 1
            if waiting[w] == 0:
                push(queue, (-rank[w], w))


def finish_of(preds, finish):
    return max((finish[p] for p in preds), default=0.0)


def _chain_home(preds, finish, stream_of, neutral, committed, work, sync):
    """The stream on which a chain starting after ``preds`` would end first, given the chains already there."""
    best = None
    for s in range(len(committed)):
        ready = 0.0
        for p in preds:
            arrive = finish[p] + (0.0 if neutral[p] or stream_of[p] == s else sync)
            ready = max(ready, arrive)
        end = max(committed[s], ready) + work
        linked = any(stream_of[p] == s for p in preds if not neutral[p])
        key = (end, not linked, s)
        if best is None or key < best[0]:
            best = (key, s)
    return best[1]


def compact(plan):
    """Close the gaps in the stream numbers, keeping their order (stream 0, where unassigned nodes run, stays 0).

    Every candidate is compacted before it is judged, so the plan returned is the one simulated.
    """
    new = {s: i for i, s in enumerate(sorted(set(plan.values()) | {0}))}
    return {key: new[s] for key, s in plan.items()}


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
