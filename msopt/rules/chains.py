"""Policy chains: a path cover of the DAG (Nimble's and DeepRec FULL_GRAPH_PARTITION's goal), folded onto N streams.

Each chain is a path of data or control edges, so two ops on one chain are always ordered by
the graph: a chain never serializes independent ops (maximum logical concurrency), and every
edge followed by a chain is an edge that needs no cross-stream sync or copy. Nimble finds the
fewest chains with a maximum bipartite matching over the transitive reduction (O(n^2) memory,
up to O(n^3) time); here the matching is over the edges themselves (Hopcroft-Karp from
scipy.sparse.csgraph: exact, O(E sqrt(V)) time, linear memory). The fewest chains do not always
fold best: the policy folds the greedy cover of earlier versions (Karp-Sipser's degree-one rule,
then bounded augmenting paths, within a few percent of the minimum), whose plans simulate 3-35%
shorter on towers_tf1/tf2, NASNetMobile and a RetinaNet-class detector; the minimum cover's
fold (``minimum_chains``) is 1-8% shorter on deepfm and stage_tf2, and the auto search tries
both. The graph is not
transitively reduced: in TensorFlow every cross-stream data edge is a copy, redundant or
not, so the edges a chain follows are exactly the copies it saves. The chains
are then folded onto at most N streams as intervals of their earliest-start schedule: a chain
goes to a stream already idle when it starts (no concurrency lost), else to the stream that
frees up first, preferring the stream it shares the most edges with.
"""

import numpy as np

from msopt.jit import compiled
from msopt.order import csr
from msopt.rules.walk import earliest_times, flatten, vertex_costs


def chains(view, options):
    dag = flatten(view)
    cost = vertex_costs(view, dag, options)
    stream_of = fold(dag, greedy_path_cover(dag), cost, options.streams)
    return dag.partition(stream_of, view)


def minimum_chains(view, options):
    """Policy chains over the minimum path cover: the auto search tries it beside the greedy cover's plan."""
    dag = flatten(view)
    cost = vertex_costs(view, dag, options)
    stream_of = fold(dag, path_cover(dag), cost, options.streams)
    return dag.partition(stream_of, view)


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


def greedy_path_cover(dag):
    """Chain id per vertex: a path cover, greedy in one topological pass (Karp-Sipser's degree-one rule), then
    shortened along bounded augmenting paths; not always the minimum, but its chains often fold better."""
    pred_ptr, pred_idx = csr(dag.preds)
    pending = np.fromiter(map(len, dag.succs), dtype=np.int64, count=len(dag.succs))
    return greedy_cover_array(pred_ptr, pred_idx, pending, np.asarray(dag.order, dtype=np.int64)).tolist()


def greedy_cover_array(pred_ptr, pred_idx, pending, order):
    """``greedy_path_cover`` over CSR arrays of the predecessors (``pending[v]``: v's successor count, consumed),
    compiled: chain id per vertex as an int64 array."""
    n = len(pred_ptr) - 1
    chain_of = np.full(n, -1, dtype=np.int64)
    _greedy_cover(order, pred_ptr, pred_idx, pending, AUGMENT_DEPTH, chain_of)
    return chain_of


AUGMENT_DEPTH = 4  # longest alternating path searched: 2 * depth + 1 edges


@compiled
def _greedy_cover(order, pred_ptr, pred_idx, pending, depth_limit, chain_of):
    """Fills ``chain_of``. The greedy pass: each vertex in ``order`` joins the chain of the free predecessor with the
    fewest other successors left (one with none left first). Then each chain head v tries to take a predecessor u
    whose successor w can in turn take another free predecessor, and so on (Kuhn's matching step, at most
    ``depth_limit`` levels, each predecessor tried once per head): each success removes one chain, and the bound
    keeps the pass linear in the edges. Chains are numbered by their first vertex in ``order``."""
    n = len(pred_ptr) - 1
    before = np.full(n, -1, dtype=np.int64)  # the vertex's predecessor on its chain
    after = np.full(n, -1, dtype=np.int64)  # the vertex's successor on its chain
    for k in range(len(order)):
        v = order[k]
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            pending[pred_idx[j]] -= 1
        best = -1
        best_last = False
        best_left = 0
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            u = pred_idx[j]
            if after[u] >= 0:
                continue
            last = pending[u] == 0  # last chance first, then the fewest other options
            if best < 0 or last > best_last or (last == best_last and -pending[u] > best_left):
                best, best_last, best_left = u, last, -pending[u]
        if best >= 0:
            after[best] = v
            before[v] = best
    # Bounded augmenting paths, depth first; frame f holds a vertex, its depth left, its next predecessor edge
    # and the predecessor being tried below it.
    seen = np.zeros(n, dtype=np.int64)  # the head (plus one) whose search last tried the vertex
    frame_v = np.empty(depth_limit + 1, dtype=np.int64)
    frame_depth = np.empty(depth_limit + 1, dtype=np.int64)
    frame_edge = np.empty(depth_limit + 1, dtype=np.int64)
    frame_u = np.empty(depth_limit + 1, dtype=np.int64)
    for k in range(len(order)):
        head = order[k]
        if before[head] >= 0 or pred_ptr[head] == pred_ptr[head + 1]:
            continue
        top = 0
        frame_v[0], frame_depth[0], frame_edge[0] = head, depth_limit, pred_ptr[head]
        joined = False  # what the frame just left returned
        returning = False
        while top >= 0:
            v = frame_v[top]
            if returning and joined:  # the successor below took another predecessor: v takes frame_u
                u = frame_u[top]
                after[u] = v
                before[v] = u
                top -= 1
                continue
            returning = False
            pushed = False
            joined = False
            while frame_edge[top] < pred_ptr[v + 1]:
                u = pred_idx[frame_edge[top]]
                frame_edge[top] += 1
                if seen[u] == head + 1:
                    continue
                seen[u] = head + 1
                w = after[u]
                if w < 0:
                    after[u] = v
                    before[v] = u
                    joined = True
                    break
                if frame_depth[top] > 0:
                    frame_u[top] = u
                    frame_v[top + 1], frame_depth[top + 1] = w, frame_depth[top] - 1
                    frame_edge[top + 1] = pred_ptr[w]
                    top += 1
                    pushed = True
                    break
            if pushed:
                continue
            top -= 1
            returning = True
    chains = 0
    for k in range(len(order)):
        v = order[k]
        if before[v] < 0:
            chain_of[v] = chains
            chains += 1
        else:
            chain_of[v] = chain_of[before[v]]


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
