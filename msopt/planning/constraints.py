"""The hard placement constraints, applied after every rule: what TensorFlow needs to place a plan as written.

apply(view, partition, streams, options) -> (partition, merges): a new partition that
TensorFlow places exactly as written and that computes the same thing, and one record per
change made. ``apply`` composes:

- msopt.graph.host_only: ops without a GPU kernel or with string outputs keep their device, no stream;
- msopt.planning.links: the groups of nodes that must share one stream (colocation, resources, TF1
  frames, fusion, XLA clusters), worked out once per view and scope;
- share_streams: each linked group moves, whole, to the stream most of its consumers got;
- (msopt.planning.const_copies, after apply: a Const read on one other stream only moves there, unless linked
  (``linked_keys``); others get per-stream copies, which emit writes.)
"""

import functools
from collections import Counter

from msopt.planning.links import RESOURCE_PRODUCERS, host_keys, view_constraints

# Consumers that only manage a variable's life: they follow the group but do not choose its stream.
# fmt: off
BOOKKEEPING_OPS = frozenset({
    "VarIsInitializedOp", "IsVariableInitialized", "DisableCopyOnRead", "DestroyResourceOp",
    "Assign", "AssignVariableOp",
})
# fmt: on


def apply(view, partition, streams, options=None, scope=None, records=True):
    """Enforce every constraint on ``partition``; returns (new partition, merge records). ``scope`` (a frozenset of
    keys, the partition's among them) names every node a plan of this view may assign: the auto search passes the
    run's, so the linked groups are worked out once for all its candidates and only where they can reach. Without
    ``records`` the moves are made but not listed (the auto search only simulates its candidates)."""
    partition = dict(partition)
    fallback = getattr(options, "fallback", None) or set()
    host, groups = view_constraints(view, _scope(partition, scope))
    merges = _drop(partition, host)
    merges += share_streams(view, partition, groups, fallback, records)
    return partition, merges


def linked_keys(view, partition, scope=None):
    """The keys ``apply(view, partition, ..., scope=scope)`` keeps in linked groups: those that share a stream with
    another node whatever the plan (its groups, already worked out for that call)."""
    return {key for keys, _ in view_constraints(view, _scope(partition, scope))[1] for key in keys}


def _scope(partition, scope):
    if scope is None or not scope.issuperset(partition):
        return frozenset(partition) if scope is None else scope | frozenset(partition)
    return scope


def _drop(partition, host):
    removed = sorted(key for key in host if key in partition)
    for key in removed:
        del partition[key]
    if not removed:
        return []
    return [
        {
            "constraint": "host_only",
            "stream": None,
            "moved": removed,
            "group_size": len(removed),
            "reason": "no GPU kernel or string data: keeps its device, no stream",
        }
    ]


# -- moving each linked group to one stream ------------------------------------------------------
def share_streams(view, partition, groups, fallback=(), records=True):
    """Give every member of each linked group (``[(keys, kinds)]``, keys of real nodes) one stream: the one most
    of its consumers got; returns a merge record per group moved (none without ``records``)."""
    merges = []
    get = partition.get
    for real, kinds in groups:
        streams = set(map(get, real))  # None: a member the partition leaves out
        unassigned = None in streams
        if unassigned:
            streams.discard(None)
        if len(streams) > 1:
            stream = vote(view, real, {k: partition[k] for k in real if k in partition}, fallback)
        elif not streams:
            continue
        else:
            (stream,) = streams
            if stream == 0 or not unassigned:
                continue  # nothing leaves stream 0 (unassigned members keep their device), or nothing moves
        moved = sorted(k for k in real if get(k, 0) != stream) if records else None
        partition.update(dict.fromkeys(real, stream))
        if moved:
            constraint, reason = _labels(frozenset(kinds))
            merges.append(
                {"constraint": constraint, "stream": stream, "moved": moved, "group_size": len(real), "reason": reason}
            )
    return merges


_NOT_VOTING = RESOURCE_PRODUCERS | BOOKKEEPING_OPS


def vote(view, members, assigned, fallback):
    """The stream of the group: most votes among its consumers, smallest id on a tie."""
    if len(set(assigned.values())) == 1:  # one stream among the assigned: whoever votes, it wins
        return next(iter(assigned.values()))
    member_set = set(members)
    pools = (  # the first non-empty pool votes; built one at a time
        lambda: [k for k in assigned if k not in fallback and voter_class(view, k, member_set) == 0],
        lambda: [k for k in assigned if k not in fallback and view.nodes[k].op not in _NOT_VOTING],
        lambda: [k for k in assigned if k not in fallback],
        lambda: list(assigned),
    )
    for pool in pools:
        voters = pool()
        if voters:
            break
    counts = Counter(assigned[k] for k in voters)
    best = max(counts.values())
    return min(s for s, c in counts.items() if c == best)


def voter_class(view, key, members):
    """Which of the vote's pools member ``key`` of the group ``members`` (a set) is in: 0, its results leave the group
    (a lookup or a read the model uses); 1, any other member that does not only manage a resource's life; 2, the
    rest. Without a fallback, the votes come from the least class among the assigned members."""
    node = view.nodes[key]
    if node.op in _NOT_VOTING:
        return 2
    nodes, host = view.nodes, host_keys(view)
    leaves = any(out not in members and out not in host for out in node.outputs if nodes[out].proto is not None)
    return 0 if leaves else 1


_REASONS = {
    "colocation": "colocation group (_class loc:@)",
    "resource": "resource/reference and its consumers",
    "frame": "TF1 control-flow frame",
    "fusion": "a group TensorFlow fuses into one kernel or sums on one device",
    "xla": "an XLA cluster (compiled into one executable)",
}


@functools.cache
def _labels(kinds):
    """(constraint, reason) of a merge record for a group linked by ``kinds`` (a frozenset)."""
    return "+".join(sorted(kinds)), "; ".join(_REASONS[k] for k in sorted(kinds))
