"""The groups that links join (connected components), in the order their nodes were first linked."""

from itertools import chain

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def link_groups(links):
    """[(keys, kinds)]: the groups ``links`` ([(a, b, kind)]) join, each with the kinds of its links (a frozenset,
    one object per combination). A group's keys, and the groups, come in the order their keys first appear in
    ``links`` (a before b): the order a union-find filled link by link lists them, which the constraints' merge
    records follow."""
    if not links:
        return []
    sources, targets, kinds = zip(*links)
    sequence = list(chain.from_iterable(zip(sources, targets)))
    keys = list(dict.fromkeys(sequence))  # first appearance order
    index = dict(zip(keys, range(len(keys))))
    ends = np.fromiter(map(index.__getitem__, sequence), np.int64, len(sequence)).reshape(-1, 2)
    n = len(keys)
    graph = coo_matrix((np.ones(len(ends), np.int8), (ends[:, 0], ends[:, 1])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    names = sorted(set(kinds))
    code = dict(zip(names, range(len(names))))
    mask = np.zeros(label.max() + 1, np.int64)
    np.bitwise_or.at(mask, label[ends[:, 0]], 1 << np.fromiter(map(code.__getitem__, kinds), np.int64, len(kinds)))
    first = np.full(len(mask), n, np.int64)
    np.minimum.at(first, label, np.arange(n))
    order = np.lexsort((np.arange(n), first[label]))  # by group (its first key), then by key
    bounds = [0, *(np.flatnonzero(np.diff(first[label][order])) + 1).tolist(), n]
    masks = mask[label[order[bounds[:-1]]]].tolist()  # per group, in order
    kind_sets = {m: frozenset(name for bit, name in enumerate(names) if m >> bit & 1) for m in set(masks)}
    ordered = list(map(keys.__getitem__, order.tolist()))
    return [(ordered[a:b], kind_sets[m]) for a, b, m in zip(bounds, bounds[1:], masks)]
