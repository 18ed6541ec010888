"""Which Const nodes get a copy per consuming stream (DeepRec's constant duplication): emit writes them."""

from msopt.constraints import is_host_only


def const_copies(view, partition):
    """{Const key: [streams]}: the other streams that consume a Const and get their own copy.

    Consts in a colocation group or under control dependencies stay single.
    """
    copies = {}
    for node in view.of_ops("Const".__eq__):
        if node.control_inputs or "_class" in node.proto.attr or is_host_only(node):
            continue
        own = partition.get(node.key, 0)
        wanted = sorted(
            {
                partition[c]
                for c in node.outputs
                if c in partition and partition[c] != own and any(s == node.key for s, _ in view.nodes[c].inputs)
            }
        )
        if wanted:
            copies[node.key] = wanted
    return copies
