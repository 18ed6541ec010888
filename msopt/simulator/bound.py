"""Lower bounds on a plan's makespan: critical path, total work and host; and those that depend on its stream count.

The simulator (msopt.simulator.simulate) runs each stream's kernels one after another, each for at least its
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

from msopt.compiled.jit import compiled
from msopt.graph.order import longest_array
from msopt.simulator.list_schedule import arrays

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
    a = arrays(cm)
    kernel, neutral = a.kernel, a.neutral
    duration = np.where(kernel, a.duration, 0.0)
    d = duration.tolist()
    pred_ptr, pred_idx = a.pred_ptr.tolist(), a.pred_idx.tolist()

    # Longest path ending at i (head, with i) and starting at i (tail, with i); task ids are topological.
    head = longest_from_source(cm, d)
    tail = longest_array(np.arange(n), a.succ_ptr, a.succ_idx, duration).tolist()

    # One critical path, source to sink, cut at ops read in place (they order nothing after them): from the
    # op ending last, back through the first predecessor (data inputs, then control) that ends last.
    chain = []
    i = max(range(n), key=head.__getitem__)
    while i >= 0 and not neutral[i]:
        chain.append(i)
        ready, i = 0.0, -1
        for j in pred_idx[pred_ptr[chain[-1]] : pred_ptr[chain[-1] + 1]]:
            if head[j] > ready:
                ready, i = head[j], j
    chain.reverse()
    if not chain:
        return {"serial_us": sum(d) / streams, "cut_us": 0.0, "cut_key": None}

    # Ancestor sums along the chain (each chain op's ancestors include the previous one's), then descendants.
    weight = duration * a.share
    chain_array = np.asarray(chain, np.int64)
    anc, anc_w = (x.tolist() for x in _ancestor_sums(chain_array, a.pred_ptr, a.pred_idx, duration, weight, neutral))
    desc, desc_w = (
        x.tolist() for x in _descendant_sums(chain_array, a.succ_ptr, a.succ_idx, duration, weight, neutral)
    )

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
        after = max(values[k][1], _launch_split(cm, _descendant_kernels(c, a, duration)))
        if values[k][0] + d[c] + after > cut:
            cut, cut_at = values[k][0] + d[c] + after, c
    return {
        "serial_us": sum(d) / streams,
        "cut_us": cut,
        "cut_key": cm.tasks.key[cut_at] if cut_at is not None else None,
    }


LAUNCH_CUTS = 16  # chain ops at which the launch split is evaluated
LAUNCH_CUT_BUDGET = 100_000  # ops visited in all (about 0.1 s): none on graphs larger than that


# -- the passes over the graph, compiled (msopt.compiled.jit): depth-first walks, sums in visit order ---------------
@compiled
def _ancestor_sums(chain, pred_ptr, pred_idx, d, w, neutral):
    """Per chain op, the time and work of its ancestors (not through ops read in place), grown along the chain."""
    seen = np.zeros(len(d), np.bool_)
    stack = np.empty(len(d) + 1, np.int64)
    anc, anc_w = np.zeros(len(chain)), np.zeros(len(chain))
    total = work = 0.0
    for k in range(len(chain)):
        c = chain[k]
        seen[c] = True
        stack[0], top = c, 1
        while top:
            top -= 1
            x = stack[top]
            for e in range(pred_ptr[x], pred_ptr[x + 1]):
                p = pred_idx[e]
                if not seen[p] and not neutral[p]:
                    seen[p] = True
                    total += d[p]
                    work += w[p]
                    stack[top] = p
                    top += 1
        anc[k], anc_w[k] = total, work  # the previous chain ops are among c's ancestors: added below
        total += d[c]
        work += w[c]
    return anc, anc_w


@compiled
def _descendants(start, succ_ptr, succ_idx, neutral, seen, stack, found):
    """How many ops after ``start`` not yet ``seen`` there are; marks them seen and lists them in ``found`` in
    depth-first visit order. Ops read in place are listed, not followed (they order nothing after them)."""
    seen[start] = True
    stack[0], top, count = start, 1, 0
    while top:
        top -= 1
        x = stack[top]
        if neutral[x]:
            continue
        for e in range(succ_ptr[x], succ_ptr[x + 1]):
            j = succ_idx[e]
            if not seen[j]:
                seen[j] = True
                found[count] = j
                count += 1
                stack[top] = j
                top += 1
    return count


@compiled
def _descendant_sums(chain, succ_ptr, succ_idx, d, w, neutral):
    """Per chain op, the time and work of its descendants, grown from the chain's end."""
    seen = np.zeros(len(d), np.bool_)
    stack, found = np.empty(len(d) + 1, np.int64), np.empty(len(d), np.int64)
    desc, desc_w = np.zeros(len(chain)), np.zeros(len(chain))
    total = work = 0.0
    for k in range(len(chain) - 1, -1, -1):
        c = chain[k]
        for q in range(_descendants(c, succ_ptr, succ_idx, neutral, seen, stack, found)):
            total += d[found[q]]
            work += w[found[q]]
        desc[k], desc_w[k] = total, work
        total += d[c]
        work += w[c]
    return desc, desc_w


def _descendant_kernels(c, a, d):
    """The standalone times ``d`` of the kernels after op ``c`` (``a``: the run's arrays), in visit order."""
    n = len(d)
    found = np.empty(n, np.int64)
    count = _descendants(c, a.succ_ptr, a.succ_idx, a.neutral, np.zeros(n, np.bool_), np.empty(n + 1, np.int64), found)
    reached = found[:count]
    return d[reached[a.kernel[reached]]].tolist()


def _launch_split(cm, times):
    """After op c ends: its descendant kernels on c's stream run one by one (A); every other one (B) is
    launched only once c's output crossed streams (sync), by the host's launch threads. The cheapest
    split of the descendants (``times``, their kernels' standalone times) puts the longest kernels in B:
    min over k of max(sum(A), sync + k launches)."""
    target = cm.target
    launch, sync = target.launch_us, target.sync_us
    threads = max(1, target.launch_threads)
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
    """Per task, the longest ``cost`` path from a source ending with it (msopt.graph.order's one longest-path rank, run
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
