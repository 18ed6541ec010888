"""Orders over a DAG of op instances: the one topological sort and the one longest-path rank."""
from collections import deque


def topological_order(succs, indegree):
    """Kahn's order, first ready first served (TensorFlow's executor finds ready ops that way).

    ``succs[v]`` lists v's consumers (an edge listed twice counts twice), ``indegree[v]`` how many
    entries of ``succs`` name v. Left with a cycle (a malformed graph), the earliest waiting vertex is
    released and the walk goes on, so every vertex appears exactly once.
    """
    n = len(succs)
    pending = list(indegree)
    ready = deque(v for v in range(n) if pending[v] == 0)
    order = []
    placed = [False] * n
    scan = 0  # every vertex before it is placed
    while len(order) < n:
        if not ready:
            while placed[scan]:
                scan += 1
            ready.append(scan)
        v = ready.popleft()
        if placed[v]:
            continue
        placed[v] = True
        order.append(v)
        for w in succs[v]:
            pending[w] -= 1
            if pending[w] == 0:
                ready.append(w)
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
