"""Which Const nodes get a copy per consuming stream (DeepRec's constant duplication): emit writes them."""

from msopt.links import host_keys


def const_copies(view, partition):
    """{Const key: [streams]}: the other streams that consume a Const and get their own copy.

    Consts in a colocation group or under control dependencies stay single.
    """
    copies = {}
    get, nodes, host = partition.get, view.nodes, host_keys(view)
    for node in view.of_ops("Const".__eq__):
        if node.control_inputs:
            continue
        own = get(node.key, 0)
        key = node.key
        wanted = {
            stream
            for c in node.outputs
            if (stream := get(c, own)) != own
            and (key not in nodes[c].control_inputs or any(s == key for s, _ in nodes[c].inputs))
        }  # a consumer reads the Const as data unless it waits on it: then its inputs say
        if wanted and not view.has_attr(node, "_class") and key not in host:
            copies[key] = sorted(wanted)
    return copies
