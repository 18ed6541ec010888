"""Policy collective: communication ops on their own stream, so that communication overlaps computation.

Communication ops are NCCL's (NcclAllReduce, NcclReduce, NcclBroadcast), TensorFlow's
collectives (Collective*), Horovod's (Horovod*), and the transfers TensorFlow inserts between
devices (_Send/_Recv and their host variants). They go to the last stream (or
options.collective.stream); everything else stays on stream 0.
"""

COMMUNICATION_PREFIXES = ("Nccl", "Collective", "Horovod", "_Nccl")
COMMUNICATION_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv", "Send", "Recv", "AllReduce"})


def is_communication(op):
    return op in COMMUNICATION_OPS or op.startswith(COMMUNICATION_PREFIXES)


def collective(view, options):
    target = options.streams - 1 if options.collective.stream is None else options.collective.stream
    if options.streams < 2 or target == 0:
        return {}
    return {node.key: target for node in view.of_ops(is_communication)}
