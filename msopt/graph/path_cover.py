"""The greedy path cover of a DAG over CSR arrays, compiled: policy chains' cover (msopt.rules.chains) and the chains
the list schedules cut the ops into (msopt.simulator.list_schedule)."""

import numpy as np

from msopt.compiled.jit import compiled


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
    _number_chains(order, before, chain_of)


@compiled
def _number_chains(order, before, chain_of):
    """A chain's id is its head's rank among the heads in ``order``; the rest of a chain follow the vertex before
    them (a vertex whose chain predecessor comes later in ``order``, behind a released cycle, keeps -1)."""
    chains = 0
    for k in range(len(order)):
        v = order[k]
        if before[v] < 0:
            chain_of[v] = chains
            chains += 1
        else:
            chain_of[v] = chain_of[before[v]]
