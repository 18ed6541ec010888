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

from msopt.rules.walk import earliest_times, flatten, vertex_costs


def chains(view, options):
    dag = flatten(view, options.run)
    cost = vertex_costs(view, dag, options)
    stream_of = fold(dag, greedy_path_cover(dag), cost, options.streams)
    return dag.partition(stream_of, view)


def minimum_chains(view, options):
    """Policy chains over the minimum path cover: the auto search tries it beside the greedy cover's plan."""
    dag = flatten(view, options.run)
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
