"""Where Const nodes go after the plan: to their readers' one stream, else a copy per reading stream (DeepRec's
constant duplication), which emit writes."""

from msopt.planning.links import host_keys


def const_copies(view, partition, fixed=None):
    """(moves, copies): {Const key: stream} and {Const key: [streams]}.

    Each Const read on streams other than its own is listed in ``copies`` with those streams (DeepRec's constant
    duplication: a copy on each). Those whose readers are all on one other stream, and that are not in ``fixed``
    (the keys a constraint links), are also listed in ``moves``: the Const may move to that stream instead, as a
    copy leaves the original running for no reader. ``fixed`` None: no moves. Consts in a colocation group or
    under control dependencies stay single.
    """
    moves, copies = {}, {}
    get, nodes, host = partition.get, view.nodes, host_keys(view)
    for node in view.of_ops("Const".__eq__):
        if node.control_inputs:
            continue
        key, readers = node.key, node.outputs
        own = get(key, 0)
        wanted = {
            stream
            for c in readers
            if (stream := get(c, own)) != own
            and (key not in nodes[c].control_inputs or any(s == key for s, _ in nodes[c].inputs))
        }  # a consumer reads the Const as data unless it waits on it: then its inputs say
        if not wanted or key in host or view.has_attr(node, "_class"):
            continue
        copies[key] = streams = sorted(wanted)
        if fixed is not None and len(streams) == 1 and key in partition and key not in fixed:
            stream = streams[0]
            if all(get(c) == stream for c in readers):
                moves[key] = stream
    return moves, copies
