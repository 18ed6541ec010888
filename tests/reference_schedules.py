"""The planner's list schedules, orders and greedy path cover as plain Python: the reference the compiled ones match."""

import heapq

from msopt.rules.walk import Dag


def kahn_order(succs, indegree, seeds=None):
    """Kahn's order, first ready first served, of the vertices no cycle holds back (``indegree`` is consumed).

    ``succs[v]`` lists v's consumers (an edge listed twice counts twice), ``indegree[v]`` how many
    entries of ``succs`` name v. ``seeds`` (default: every vertex of indegree 0) start the walk.
    """
    order = [v for v, d in enumerate(indegree) if d == 0] if seeds is None else list(seeds)
    i = 0
    while i < len(order):
        for w in succs[order[i]]:
            indegree[w] -= 1
            if indegree[w] == 0:
                order.append(w)
        i += 1
    return order


def topological_order(succs, indegree):
    """Every vertex once, in Kahn's order (TensorFlow's executor finds ready ops first come first served).

    Left with a cycle (a malformed graph), the earliest waiting vertex is released and the walk goes on.
    """
    n = len(succs)
    pending = list(indegree)
    order = kahn_order(succs, pending)
    if len(order) < n:
        placed = [False] * n
        for v in order:
            placed[v] = True
        scan = 0
        while len(order) < n:
            while placed[scan]:
                scan += 1
            pending[scan] = 0  # released: its remaining inputs no longer count
            more = kahn_order(succs, pending, seeds=[scan])
            for v in more:
                placed[v] = True
            order.extend(more)
    return order


def longest_to_sink(order, succs, cost):
    """Per vertex, the longest cost path from it to any sink, its own cost included (HEFT's upward rank)."""
    rank = [0.0] * len(succs)
    for v in reversed(order):
        best = 0.0
        for w in succs[v]:
            if rank[w] > best:
                best = rank[w]
        rank[v] = best + cost[v]
    return rank


def greedy_path_cover(dag):
    """Chain id per vertex: a path cover, greedy in one topological pass (Karp-Sipser's degree-one rule), then
    shortened along bounded augmenting paths; not always the minimum, but its chains often fold better."""
    n = len(dag)
    preds, succs = dag.preds, dag.succs
    before = [-1] * n  # the vertex's predecessor on its chain
    after = [-1] * n  # the vertex's successor on its chain
    pending = [len(s) for s in succs]  # successors not yet visited
    for v in dag.order:
        best, best_rank = -1, None
        for u in preds[v]:
            pending[u] -= 1
        for u in preds[v]:
            if after[u] >= 0:
                continue
            rank = (pending[u] == 0, -pending[u])  # last chance first, then the fewest other options
            if best_rank is None or rank > best_rank:
                best, best_rank = u, rank
        if best >= 0:
            after[best], before[v] = v, best
    _reroute(dag, before, after)
    chain_of = [-1] * n
    chains = 0
    for v in dag.order:
        if before[v] < 0:
            chain_of[v] = chains
            chains += 1
        else:
            chain_of[v] = chain_of[before[v]]
    return chain_of


AUGMENT_DEPTH = 4  # longest alternating path searched: 2 * depth + 1 edges


def _reroute(dag, before, after):
    """Join chains along augmenting paths (Kuhn's matching step, bounded in depth): a chain head v
    takes a predecessor u whose successor w can in turn take another free predecessor, and so on.
    Each success removes one chain; the bound keeps the pass linear in the edges."""
    preds = dag.preds

    def augment(v, depth, seen):
        for u in preds[v]:
            if u in seen:
                continue
            seen.add(u)
            w = after[u]
            if w < 0 or (depth > 0 and augment(w, depth - 1, seen)):
                after[u], before[v] = v, u
                return True
        return False

    for v in dag.order:
        if before[v] < 0 and preds[v]:
            augment(v, AUGMENT_DEPTH, set())


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
        dag = Dag.of_lists(t.key, preds, succs)
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


def path_cover(dag):
    """Chain id per vertex: a minimum vertex-disjoint path cover along the DAG's edges.

    A maximum matching of (vertex, successor) pairs (Hopcroft-Karp, scipy.sparse.csgraph), exact
    in O(E sqrt(V)): each matched pair is one chain step, so n - |matching| chains, the fewest
    any path cover along the edges has. Only edges going forward in ``dag.order`` count, so a
    chain never closes a cycle. Chains are numbered by their first vertex in ``dag.order``.
    """
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching

    n = len(dag)
    if n == 0:
        return []
    order = np.asarray(dag.order, dtype=np.int64)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    counts = np.fromiter((len(p) for p in dag.preds), dtype=np.int64, count=n)
    dst = np.repeat(np.arange(n, dtype=np.int64), counts)
    src = np.fromiter((u for p in dag.preds for u in p), dtype=np.int64, count=int(counts.sum()))
    forward = position[src] < position[dst]
    src, dst = src[forward], dst[forward]
    edges = csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
    edges.sum_duplicates()
    after = maximum_bipartite_matching(edges, perm_type="column")  # per vertex: its successor on its chain, or -1
    before = np.full(n, -1, dtype=np.int64)
    matched = after >= 0
    before[after[matched]] = np.flatnonzero(matched)
    # A chain's id is its head's rank among the heads in dag.order; the rest of a chain follow their head.
    chain_of = np.full(n, -1, dtype=np.int64)
    heads = order[before[order] < 0]
    chain_of[heads] = np.arange(len(heads))
    step = heads
    while len(step):
        step = after[step]
        step = step[step >= 0]
        chain_of[step] = chain_of[before[step]]
    return chain_of.tolist()


def fold(dag, chain_of, cost, streams):
    """Stream per vertex: chains laid on at most ``streams`` streams as intervals (see the module docstring)."""
    start, finish = earliest_times(dag, cost)
    count = max(chain_of, default=-1) + 1
    first = [float("inf")] * count
    last = [0.0] * count
    work = [0.0] * count
    for v, c in enumerate(chain_of):
        if start[v] < first[c]:
            first[c] = start[v]
        if finish[v] > last[c]:
            last[c] = finish[v]
        work[c] += cost[v]
    # Chains longest-first within one start time, so the critical chain lands on stream 0.
    ordered = sorted(range(count), key=lambda c: (first[c], -work[c], c))
    stream_of_chain = [0] * count
    free_at = [(0.0, s) for s in range(streams)]  # (time the stream's last chain ends, stream)
    neighbours = _chain_neighbours(dag, chain_of) if streams > 1 else None
    for c in ordered:
        idle = [s for end, s in free_at if end <= first[c]]
        if idle:
            s = _most_linked(idle, neighbours.get(c) if neighbours else None, stream_of_chain)
        else:
            s = min(free_at)[1]
        stream_of_chain[c] = s
        free_at[s] = (max(free_at[s][0], first[c]) + max(last[c] - first[c], 0.0), s)
    return [stream_of_chain[c] for c in chain_of]


def _chain_neighbours(dag, chain_of):
    """{chain: {earlier chain: edges between them}}, counting only edges into a chain from already placed ones."""
    links = {}
    for v, ps in enumerate(dag.preds):
        c = chain_of[v]
        for u in ps:
            d = chain_of[u]
            if d != c:
                inner = links.setdefault(c, {})
                inner[d] = inner.get(d, 0) + 1
    return links


def _most_linked(candidates, linked, stream_of_chain):
    if not linked:
        return candidates[0]
    weight = dict.fromkeys(candidates, 0)
    for chain, edges in linked.items():
        s = stream_of_chain[chain]
        if s in weight:
            weight[s] += edges
    return max(candidates, key=lambda s: (weight[s], -s))


def earliest_times(dag, cost):
    """(start, finish) per vertex with unlimited streams and free syncs: the ASAP schedule."""
    start = [0.0] * len(dag)
    finish = [0.0] * len(dag)
    preds = dag.preds
    for v in dag.order:
        s = 0.0
        for u in preds[v]:
            if finish[u] > s:
                s = finish[u]
        start[v] = s
        finish[v] = s + cost[v]
    return start, finish
