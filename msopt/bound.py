"""Lower bounds on a plan's makespan: critical path, total work and host; and those that depend on its stream count.

The simulator (msopt.simulate) runs each stream's kernels one after another, each for at least its
standalone time (sharing the GPU only slows a kernel down), and starts a kernel only after every
kernel it depends on has ended: on its own stream by stream order, on another stream by the event
it waits for. Two bounds follow for any plan on N streams:

  serial   no stream finishes before its share of the kernels' standalone times: sum / N.
  cut      for an op i, every kernel it depends on (transitively) ends before i starts, and every
           kernel that depends on i starts after i ends. So the run lasts at least
           max(longest path into i, ancestors' standalone sum / N, ancestors' work) + i's time
           + max(longest path out of i, descendants' standalone sum / N, descendants' work),
           work being standalone time x GPU share (the GPU's capacity is 1: the run at full GPU).
           At a few of those ops (graphs up to 100,000 ops) the part after i also counts launches: descendants on i's stream run
           one after another, the others are launched only once i's output has crossed streams, one
           launch at a time per host launch thread (``target.launch_threads``, the simulator's
           launchers; if the host model changes how many threads launch at once, change it here).
           It binds at narrow waists: a backbone whose output feeds many small per-class loops, a
           detection head, a pooler. Evaluated at every op of one critical path, with ancestor and
           descendant sums grown incrementally along it (linear time in the graph).

Paths through ops read in place by every stream (constants, inputs, variable handles: the cost
model's ``neutral`` ops) are not followed: such an op does not order its consumers after anything.
"""

from weakref import WeakKeyDictionary

import numpy as np

from msopt.list_schedule import arrays
from msopt.order import longest_array

_cache: "WeakKeyDictionary" = WeakKeyDictionary()


def stream_bound(cost_model, streams):
    """{"serial_us", "cut_us", "cut_key"} for plans on ``streams`` streams (computed once per count)."""
    per_model = _cache.setdefault(cost_model, {})
    if streams not in per_model:
        per_model[streams] = _compute(cost_model, max(1, int(streams)))
    return per_model[streams]


def _compute(cm, streams):
    n = len(cm)
    if n == 0:
        return {"serial_us": 0.0, "cut_us": 0.0, "cut_key": None}
    t = cm.tasks
    kernel, neutral = cm.kernel, cm.neutral
    d = [cm.duration[i] if kernel[i] else 0.0 for i in range(n)]
    succ = cm.successors()
    inputs, control = t.inputs, t.control

    # Longest path ending at i (head, with i) and starting at i (tail, with i); task ids are topological.
    head = longest_from_source(cm, d)
    a = arrays(cm)
    tail = longest_array(np.arange(n), a.succ_ptr, a.succ_idx, d).tolist()

    # One critical path, source to sink, cut at ops read in place (they order nothing after them): from the
    # op ending last, back through the first predecessor (data inputs, then control) that ends last.
    end = max(range(n), key=head.__getitem__)
    chain = []
    i = end
    while i >= 0 and not neutral[i]:
        chain.append(i)
        ready, i = 0.0, -1
        for j in [j for j, _ in inputs[chain[-1]]] + control[chain[-1]]:
            if head[j] > ready:
                ready, i = head[j], j
    chain.reverse()
    if not chain:
        return {"serial_us": sum(d) / streams, "cut_us": 0.0, "cut_key": None}

    # Ancestor sums along the chain (each chain op's ancestors include the previous one's), then descendants.
    w = [d[i] * cm.share[i] for i in range(n)]
    anc, anc_w = [0.0] * len(chain), [0.0] * len(chain)
    seen = bytearray(n)
    total = work = 0.0
    for k, c in enumerate(chain):
        stack = [c]
        seen[c] = 1
        while stack:
            x = stack.pop()
            for p in [j for j, _ in inputs[x]] + control[x]:
                if not seen[p] and not neutral[p]:
                    seen[p] = 1
                    total += d[p]
                    work += w[p]
                    stack.append(p)
        anc[k], anc_w[k] = total, work  # the previous chain ops are among c's ancestors: added below
        total += d[c]
        work += w[c]
    desc, desc_w = [0.0] * len(chain), [0.0] * len(chain)
    seen = bytearray(n)
    total = work = 0.0
    for k in range(len(chain) - 1, -1, -1):
        c = chain[k]
        seen[c] = 1
        stack = [c]
        while stack:
            x = stack.pop()
            if neutral[x]:
                continue
            for j, _ in succ[x]:
                if not seen[j]:
                    seen[j] = 1
                    total += d[j]
                    work += w[j]
                    stack.append(j)
        desc[k], desc_w[k] = total, work
        total += d[c]
        work += w[c]

    cut, cut_at, values = 0.0, None, []
    for k, c in enumerate(chain):
        before = max(head[c] - d[c], anc[k] / streams, anc_w[k])
        after = max(tail[c] - d[c], desc[k] / streams, desc_w[k])
        values.append((before, after))
        if before + d[c] + after > cut:
            cut, cut_at = before + d[c] + after, c

    # The launches behind a cut, at a few chain ops (each costs a pass over the descendants).
    budget = min(LAUNCH_CUTS, LAUNCH_CUT_BUDGET // max(1, n))
    picks = sorted(range(len(chain)), key=lambda k: -(values[k][0] + d[chain[k]] + values[k][1]))[:budget]
    for k in picks:
        c = chain[k]
        after = max(values[k][1], _launch_split(cm, c, d, succ, neutral))
        if values[k][0] + d[c] + after > cut:
            cut, cut_at = values[k][0] + d[c] + after, c
    return {"serial_us": sum(d) / streams, "cut_us": cut, "cut_key": t.key[cut_at] if cut_at is not None else None}


LAUNCH_CUTS = 16  # chain ops at which the launch split is evaluated
LAUNCH_CUT_BUDGET = 100_000  # ops visited in all (about 0.1 s): none on graphs larger than that


def _launch_split(cm, c, d, succ, neutral):
    """After op c ends: its descendant kernels on c's stream run one by one (A); every other one (B) is
    launched only once c's output crossed streams (sync), by the host's launch threads. The cheapest
    split of the descendants puts the longest kernels in B: min over k of max(sum(A), sync + k launches)."""
    target = cm.target
    launch, sync = target.launch_us, target.sync_us
    threads = max(1, target.launch_threads)
    seen = bytearray(len(d))
    seen[c] = 1
    stack, times = [c], []
    while stack:
        x = stack.pop()
        if neutral[x]:
            continue
        for j, _ in succ[x]:
            if not seen[j]:
                seen[j] = 1
                if cm.kernel[j]:
                    times.append(d[j])
                stack.append(j)
    if not times or launch <= 0:
        return 0.0
    times.sort(reverse=True)
    rest = sum(times)  # sum(A) when B holds the k longest
    best = rest
    for k, t in enumerate(times, start=1):
        rest -= t
        best = min(best, max(rest, sync + launch * k / threads))
        if rest <= sync + launch * k / threads:
            break
    return best


def tightened(bound, cost_model, streams):
    """``bound`` (lower_bound's dict) with lower_bound_us raised to the stream-count bounds, which it adds."""
    extra = stream_bound(cost_model, streams)
    out = dict(bound)
    out["serial_streams_us"] = extra["serial_us"]
    out["cut_us"] = extra["cut_us"]
    out["lower_bound_us"] = max(bound["lower_bound_us"], extra["serial_us"], extra["cut_us"])
    return out


def longest_from_source(cm, cost):
    """Per task, the longest ``cost`` path from a source ending with it (msopt.order's one longest-path rank, run
    over the predecessors from the last task back: task ids are topological)."""
    n = len(cm)
    if n == 0:
        return []
    a = arrays(cm)
    return longest_array(np.arange(n - 1, -1, -1), a.pred_ptr, a.pred_idx, cost).tolist()


def lower_bound(cost_model, streams=1):
    """No schedule on ``streams`` streams of this GPU beats the longest chain of standalone times, the total
    work at full GPU, or the host's time to handle every op and launch every kernel (spread over as many
    threads as there are executors and pool threads, the driver's serialized share of launches excepted)."""
    cm = cost_model
    n = len(cm)
    critical = max(longest_from_source(cm, cm.duration), default=0.0)
    work = sum(d * s for d, s, k in zip(cm.duration, cm.share, cm.kernel) if k)
    target, kernels = cm.target, sum(cm.kernel)
    threads = max(1, min(streams, target.launch_threads))
    host = max(
        (kernels * target.launch_us + n * target.op_overhead_us) / threads,
        kernels * target.launch_us * target.launch_contention,
    )
    return {
        "lower_bound_us": max(critical, work, host),
        "critical_path_us": critical,
        "total_work_us": work,
        "host_launch_us": host,
    }


__all__ = ["lower_bound", "stream_bound", "tightened"]
