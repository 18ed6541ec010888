"""Lower bounds on a plan's makespan that depend on its stream count: serial streams, and the cut at each critical op.

The simulator (msopt.simulate) runs each stream's kernels one after another, each for at least its
standalone time (sharing the GPU only slows a kernel down), and starts a kernel only after every
kernel it depends on has ended: on its own stream by stream order, on another stream by the event
it waits for. Two bounds follow for any plan on N streams:

  serial   no stream finishes before its share of the kernels' standalone times: sum / N.
  cut      for an op i, every kernel it depends on (transitively) ends before i starts, and every
           kernel that depends on i starts after i ends. So the run lasts at least
           max(longest path into i, ancestors' standalone sum / N) + i's time
           + max(longest path out of i, descendants' standalone sum / N).
           It binds at narrow waists: a backbone whose output feeds many small per-class loops, a
           detection head, a pooler. Evaluated at every op of one critical path, with ancestor and
           descendant sums grown incrementally along it (linear time in the graph).

Paths through ops read in place by every stream (constants, inputs, variable handles: the cost
model's ``neutral`` ops) are not followed: such an op does not order its consumers after anything.
"""

from weakref import WeakKeyDictionary

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
    preds = [[j for j, _ in t.inputs[i]] + list(t.control[i]) for i in range(n)]

    # Longest path ending at i (head, with i) and starting at i (tail, with i); task ids are topological.
    head, best_pred = [0.0] * n, [-1] * n
    for i in range(n):
        ready = 0.0
        for j in preds[i]:
            if head[j] > ready:
                ready, best_pred[i] = head[j], j
        head[i] = ready + d[i]
    tail = [0.0] * n
    for i in range(n - 1, -1, -1):
        after = 0.0
        for j, _ in succ[i]:
            if tail[j] > after:
                after = tail[j]
        tail[i] = after + d[i]

    # One critical path, source to sink, cut at ops read in place (they order nothing after them).
    end = max(range(n), key=head.__getitem__)
    chain = []
    i = end
    while i >= 0 and not neutral[i]:
        chain.append(i)
        i = best_pred[i]
    chain.reverse()
    if not chain:
        return {"serial_us": sum(d) / streams, "cut_us": 0.0, "cut_key": None}

    # Ancestor sums along the chain (each chain op's ancestors include the previous one's), then descendants.
    anc = [0.0] * len(chain)
    seen = bytearray(n)
    total = 0.0
    for k, c in enumerate(chain):
        stack = [c]
        seen[c] = 1
        while stack:
            x = stack.pop()
            for p in preds[x]:
                if not seen[p] and not neutral[p]:
                    seen[p] = 1
                    total += d[p]
                    stack.append(p)
        anc[k] = total  # the previous chain ops are among c's ancestors: their times were added below
        total += d[c]
    desc = [0.0] * len(chain)
    seen = bytearray(n)
    total = 0.0
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
                    stack.append(j)
        desc[k] = total
        total += d[c]

    cut, cut_at = 0.0, None
    for k, c in enumerate(chain):
        before = max(head[c] - d[c], anc[k] / streams)
        after = max(tail[c] - d[c], desc[k] / streams)
        value = before + d[c] + after
        if value > cut:
            cut, cut_at = value, c
    return {"serial_us": sum(d) / streams, "cut_us": cut, "cut_key": t.key[cut_at] if cut_at is not None else None}


def tightened(bound, cost_model, streams):
    """``bound`` (simulate.lower_bound's dict) with lower_bound_us raised to the stream-count bounds, which it adds."""
    extra = stream_bound(cost_model, streams)
    out = dict(bound)
    out["serial_streams_us"] = extra["serial_us"]
    out["cut_us"] = extra["cut_us"]
    out["lower_bound_us"] = max(bound["lower_bound_us"], extra["serial_us"], extra["cut_us"])
    return out


__all__ = ["stream_bound", "tightened"]
