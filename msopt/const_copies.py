"""Which Const nodes get a copy per consuming stream (DeepRec's constant duplication): emit writes them."""

from msopt.links import is_host


def const_copies(view, partition):
    """{Const key: [streams]}: the other streams that consume a Const and get their own copy.

    Consts in a colocation group or under control dependencies stay single.
    """
    copies = {}
    get = partition.get
    for node in view.of_ops("Const".__eq__):
        if node.control_inputs:
            continue
        own = get(node.key, 0)
        key = node.key
        wanted = {
            stream
            for c in node.outputs
            if (stream := get(c, own)) != own and any(s == key for s, _ in view.nodes[c].inputs)
        }  # the partition first: the attributes below are read only for a Const other streams consume
        if wanted and "_class" not in node.proto.attr and not is_host(view, key):
            copies[key] = sorted(wanted)
    return copies
