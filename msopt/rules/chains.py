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

from msopt.compiled.jit import compiled
from msopt.graph.path_cover import _number_chains, greedy_cover_array
from msopt.rules.walk import flatten, vertex_costs


def chains(view, options):
    return flatten(view, options.run).as_plan(chain_plan(view, options))


def minimum_chains(view, options):
    """Policy chains over the minimum path cover: the auto search tries it beside the greedy cover's plan."""
    return flatten(view, options.run).as_plan(minimum_chain_plan(view, options))


def chain_plan(view, options, cover=None):
    """Policy chains' plan as an int64 array over the run's keys (msopt.rules.walk.Dag.distinct), as the auto search
    takes it: the chains of ``cover`` (the greedy path cover if None) folded."""
    dag = flatten(view, options.run)
    chain_of = greedy_path_cover(dag) if cover is None else cover(dag)
    return dag.run_streams(fold(dag, chain_of, vertex_costs(view, dag, options), options.streams))


def minimum_chain_plan(view, options):
    """``minimum_chains`` as ``chain_plan`` gives it."""
    return chain_plan(view, options, path_cover)


def path_cover(dag):
    """Chain id per vertex (an int64 array): a minimum vertex-disjoint path cover along the DAG's edges.

    A maximum matching of (vertex, successor) pairs (Hopcroft-Karp, scipy.sparse.csgraph), exact
    in O(E sqrt(V)): each matched pair is one chain step, so n - |matching| chains, the fewest
    any path cover along the edges has. Only edges going forward in ``dag.order`` count, so a
    chain never closes a cycle. Chains are numbered by their first vertex in ``dag.order``.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching

    n = len(dag)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.asarray(dag.order, dtype=np.int64)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    pred_ptr, src = dag.pred_ptr, dag.pred_idx
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(pred_ptr))
    forward = position[src] < position[dst]
    src, dst = src[forward], dst[forward]
    edges = csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
    edges.sum_duplicates()
    after = maximum_bipartite_matching(edges, perm_type="column")  # per vertex: its successor on its chain, or -1
    before = np.full(n, -1, dtype=np.int64)
    matched = after >= 0
    before[after[matched]] = np.flatnonzero(matched)
    chain_of = np.full(n, -1, dtype=np.int64)
    _number_chains(order, before, chain_of)
    return chain_of


def greedy_path_cover(dag):
    """Chain id per vertex (an int64 array): a path cover, greedy in one topological pass (Karp-Sipser's degree-one rule), then
    shortened along bounded augmenting paths; not always the minimum, but its chains often fold better."""
    pending = np.diff(dag.succ_ptr)
    return greedy_cover_array(dag.pred_ptr, dag.pred_idx, pending, np.asarray(dag.order, dtype=np.int64))


def fold(dag, chain_of, cost, streams):
    """Stream per vertex (an int64 array): chains laid on at most ``streams`` streams as intervals (see the module docstring).

    A chain id -1 (a vertex whose chain runs through a released cycle) counts as the last chain."""
    pred_ptr, pred_idx = dag.pred_ptr, dag.pred_idx
    chain_of = np.asarray(chain_of, dtype=np.int64)
    count = int(chain_of.max(initial=-1)) + 1
    first = np.full(count, np.inf)  # per chain: its earliest start, latest finish and total time
    last = np.zeros(count)
    work = np.zeros(count)
    _spans(
        np.asarray(dag.order, dtype=np.int64),
        pred_ptr,
        pred_idx,
        chain_of,
        np.asarray(cost, dtype=np.float64),
        first,
        last,
        work,
    )
    # Chains longest-first within one start time, so the critical chain lands on stream 0.
    ordered = np.lexsort((np.arange(count), -work, first))
    members = np.argsort(chain_of, kind="stable")  # vertices by chain, chain -1 first
    member_ptr = np.searchsorted(chain_of[members], np.arange(-1, count + 1))
    stream_of = np.zeros(len(chain_of), dtype=np.int64)
    _fold(ordered, members, member_ptr, pred_ptr, pred_idx, chain_of, first, last, streams, stream_of)
    return stream_of


@compiled
def _spans(order, pred_ptr, pred_idx, chain_of, cost, first, last, work):
    """Per chain, the earliest start and latest finish of its vertices in the earliest-start schedule (unlimited
    streams, free syncs) and their total time."""
    n = len(chain_of)
    count = len(first)
    start = np.zeros(n)
    finish = np.zeros(n)
    for k in range(len(order)):
        v = order[k]
        ready = 0.0
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            if finish[pred_idx[j]] > ready:
                ready = finish[pred_idx[j]]
        start[v] = ready
        finish[v] = ready + cost[v]
    for v in range(n):
        c = chain_of[v] if chain_of[v] >= 0 else chain_of[v] + count
        if start[v] < first[c]:
            first[c] = start[v]
        if finish[v] > last[c]:
            last[c] = finish[v]
        work[c] += cost[v]


@compiled
def _fold(ordered, members, member_ptr, pred_ptr, pred_idx, chain_of, first, last, streams, stream_of):
    """Fills ``stream_of``: each chain in turn to the idle stream (its last chain ended by the chain's start)
    holding most of the chain's inputs (the lowest among equals), else to the stream free first."""
    count = len(first)
    stream_of_chain = np.zeros(count, dtype=np.int64)
    free_at = np.zeros(streams)  # when the stream's last chain ends
    weight = np.zeros(streams, dtype=np.int64)
    for q in range(count):
        c = ordered[q]
        s = -1
        for t in range(streams):
            if free_at[t] <= first[c]:
                s = t
                break
        if s >= 0:
            for t in range(streams):
                weight[t] = 0
            for m in range(member_ptr[c + 1], member_ptr[c + 2]):  # chain c's vertices
                v = members[m]
                for j in range(pred_ptr[v], pred_ptr[v + 1]):
                    d = chain_of[pred_idx[j]]
                    if d != c:
                        weight[stream_of_chain[d if d >= 0 else d + count]] += 1
            for t in range(s + 1, streams):
                if free_at[t] <= first[c] and weight[t] > weight[s]:
                    s = t
        else:
            s = 0
            for t in range(1, streams):
                if free_at[t] < free_at[s]:
                    s = t
        stream_of_chain[c] = s
        end = free_at[s]
        if first[c] > end:
            end = first[c]
        span = last[c] - first[c]
        if 0.0 > span:
            span = 0.0
        free_at[s] = end + span
    for v in range(len(chain_of)):
        c = chain_of[v]
        stream_of[v] = stream_of_chain[c if c >= 0 else c + count]
