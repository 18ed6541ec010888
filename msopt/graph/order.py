"""The one topological sort (first ready first served, or by priority) and the one longest-path rank of a DAG.

Each walk is written once, as a loop over CSR arrays (``indptr``, ``indices``: v's successors are
``indices[indptr[v]:indptr[v + 1]]``). The planner runs it compiled (msopt.compiled.jit, over numpy
arrays); the input checks of ``msopt inspect`` run the same function interpreted over Python
lists (``kahn_order``), so that inspecting a model imports neither numpy nor numba.
"""

from functools import cache
from itertools import accumulate, chain


def _walk(indptr, indices, pending, order, placed, release):
    """Kahn's walk, first ready first served, into ``order``; returns how many vertices it placed.

    ``pending[v]`` counts v's entries in ``indices`` (consumed). With ``release``, a walk stopped by a
    cycle releases the earliest waiting vertex (its remaining inputs no longer count) and goes on.
    """
    n = len(pending)
    count = 0
    for v in range(n):
        if pending[v] == 0:
            order[count] = v
            count += 1
    head = 0
    scan = 0
    while True:
        while head < count:
            v = order[head]
            placed[v] = True
            for j in range(indptr[v], indptr[v + 1]):
                w = indices[j]
                pending[w] -= 1
                if pending[w] == 0:
                    order[count] = w
                    count += 1
            head += 1
        if count >= n or not release:
            return count
        while placed[scan]:
            scan += 1
        pending[scan] = 0
        order[count] = scan
        count += 1


def _longest(order, indptr, indices, cost, rank):
    """Fills ``rank``: per vertex the longest cost path to a sink, its own cost included, ``order`` walked backwards."""
    for k in range(len(order) - 1, -1, -1):
        v = order[k]
        best = 0.0
        for j in range(indptr[v], indptr[v + 1]):
            if rank[indices[j]] > best:
                best = rank[indices[j]]
        rank[v] = best + cost[v]


def _priority_walk(waiting, indptr, indices, priority, heap, stage, order):
    """Kahn's walk taking, each time, the ready vertex of the highest ``priority`` (the lowest id among equals)
    into ``order``; returns how many vertices it placed (fewer when a cycle holds some back).

    ``waiting[v]`` counts v's entries in ``indices`` (consumed); ``heap`` and ``stage`` are int buffers of one
    entry per vertex. The ready set is a binary heap written out here because the compiled form cannot call
    Python's heapq; the vertex taken is always the unique best of the ready set, so the order does not
    depend on how the heap is kept.
    """
    staged = 0  # freed vertices waiting to enter the heap
    for v in range(len(waiting)):
        if waiting[v] == 0:
            stage[staged] = v
            staged += 1
    size = 0
    count = 0
    while staged > 0 or size > 0:
        for s in range(staged):  # push: sift the new vertex up past every worse parent
            v = stage[s]
            k = size
            size += 1
            while k > 0:
                parent = (k - 1) >> 1
                p = heap[parent]
                if priority[v] > priority[p] or (priority[v] == priority[p] and v < p):
                    heap[k] = p
                    k = parent
                else:
                    break
            heap[k] = v
        staged = 0
        best = heap[0]  # pop: the last entry sifts down from the root
        size -= 1
        v = heap[size]
        k = 0
        while True:
            child = 2 * k + 1
            if child >= size:
                break
            c = heap[child]
            if child + 1 < size:
                d = heap[child + 1]
                if priority[d] > priority[c] or (priority[d] == priority[c] and d < c):
                    child += 1
                    c = d
            if priority[c] > priority[v] or (priority[c] == priority[v] and c < v):
                heap[k] = c
                k = child
            else:
                break
        if size > 0:
            heap[k] = v
        order[count] = best
        count += 1
        for j in range(indptr[best], indptr[best + 1]):
            w = indices[j]
            waiting[w] -= 1
            if waiting[w] == 0:
                stage[staged] = w
                staged += 1
    return count


@cache
def _compiled():
    from msopt.compiled.jit import compiled

    return compiled(_walk), compiled(_longest), compiled(_priority_walk)


# -- over CSR arrays (numpy), compiled -----------------------------------------------------------


def csr(lists):
    """(indptr, indices) int64 arrays of a list of lists (``lists[v]`` in order)."""
    import numpy as np

    counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    indptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(indptr[-1]))
    return indptr, indices


def topological_array(indptr, indices, pending):
    """Every vertex once, in Kahn's order (TensorFlow's executor finds ready ops first come first served), as an
    int64 array. Left with a cycle (a malformed graph), the earliest waiting vertex is released and the walk
    goes on. ``pending`` (per vertex, its entries in ``indices``) is copied, not consumed."""
    import numpy as np

    n = len(pending)
    order = np.empty(n, dtype=np.int64)
    walk = _compiled()[0]
    walk(indptr, indices, np.array(pending, dtype=np.int64), order, np.zeros(n, dtype=np.bool_), True)
    return order


def longest_array(order, indptr, indices, cost):
    """Per vertex, the longest cost path from it to any sink, its own cost included (HEFT's upward rank), as a
    float64 array; ``order`` is a topological order."""
    import numpy as np

    rank = np.zeros(len(indptr) - 1, dtype=np.float64)
    _compiled()[1](np.asarray(order, dtype=np.int64), indptr, indices, np.asarray(cost, dtype=np.float64), rank)
    return rank


def priority_array(waiting, indptr, indices, priority):
    """The vertices in Kahn's order taking the ready vertex of the highest ``priority`` first (the lowest id
    among equals), as an int64 array; vertices a cycle holds back are left out. ``waiting`` is copied."""
    import numpy as np

    n = len(waiting)
    order = np.empty(n, dtype=np.int64)
    buffers = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    count = _compiled()[2](
        np.array(waiting, dtype=np.int64), indptr, indices, np.asarray(priority, dtype=np.float64), *buffers, order
    )
    return order[:count]


# -- over Python lists (the callers' form) -------------------------------------------------------


def kahn_order(succs, indegree):
    """Kahn's order, first ready first served, of the vertices no cycle holds back (``indegree`` is consumed).

    ``succs[v]`` lists v's consumers (an edge listed twice counts twice), ``indegree[v]`` how many
    entries of ``succs`` name v. Interpreted, over lists: the input checks run it without numpy or numba.
    """
    n = len(succs)
    indptr = [0, *accumulate(map(len, succs))]
    indices = list(chain.from_iterable(succs))
    order = [0] * n
    count = _walk(indptr, indices, indegree, order, [False] * n, False)
    del order[count:]
    return order


def priority_order(succs, priority):
    """``priority_array`` over lists, interpreted: the vertices in Kahn's order taking the ready vertex of the
    highest ``priority`` first (the lowest id among equals); vertices a cycle holds back are left out."""
    n = len(succs)
    waiting = [0] * n
    for targets in succs:
        for w in targets:
            waiting[w] += 1
    indptr = [0, *accumulate(map(len, succs))]
    order = [0] * n
    count = _priority_walk(waiting, indptr, list(chain.from_iterable(succs)), priority, [0] * n, [0] * n, order)
    del order[count:]
    return order


def topological_order(succs, indegree):
    """``topological_array`` over lists: every vertex once, in Kahn's order, cycles released earliest first."""
    indptr, indices = csr(succs)
    return topological_array(indptr, indices, indegree).tolist()


def longest_to_sink(order, succs, cost):
    """``longest_array`` over lists: per vertex, the longest cost path from it to any sink, its own cost included."""
    indptr, indices = csr(succs)
    return longest_array(order, indptr, indices, cost).tolist()
