"""Orders over a DAG of op instances: the one topological sort and the one longest-path rank."""


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
