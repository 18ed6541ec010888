"""A flattened run's tasks renumbered in the order TensorFlow's executor finds them ready, its edges as CSR arrays."""

import numpy as np

from msopt.graph.order import topological_array
from msopt.graph.tasks import gather


def _distinct(values):
    """The distinct values, ascending (np.unique hashes: slower on millions of edges than a sort)."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def _kahn(ptr, successors, pending):
    """msopt.graph.order's topological sort (Kahn's, first ready first served) of the CSR successor arrays, as an array."""
    return topological_array(np.asarray(ptr, np.int64), np.asarray(successors, np.int64), pending)


def renumber(out, built, data, control):
    """Renumber tasks in the order TensorFlow's executor would find them ready (FIFO over ready ops)."""
    n = len(built.key)
    data_dst, data_src, data_port = data
    control_dst, control_src = control
    # Each task's distinct predecessors (itself excepted), successors listed in ascending task order.
    dst = np.concatenate([data_dst, control_dst])
    src = np.concatenate([data_src, control_src])
    pair = _distinct(src[src != dst] * n + dst[src != dst])
    succ_src, succ_dst = np.divmod(pair, max(n, 1))
    pending = np.bincount(succ_dst, minlength=n)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(succ_src, minlength=n), out=ptr[1:])
    order = _kahn(ptr, succ_dst, pending)
    new = np.empty(n, np.int64)
    new[order] = np.arange(n, dtype=np.int64)
    out.key = gather(built.key, order)
    out.op = gather(built.op, order)
    out.instance = gather(built.instance, order) if len(built.instances) > 1 else [0] * n
    out.node = gather(built.node, order)
    out._op_codes = (built.op_codes[0], built.op_codes[1][order])
    out.created = order  # per task, its place in the creation order (msopt.planning.written_run derives a run from it)
    del out.inputs, out.control  # made from the arrays on first use
    # Drop edges that would point backwards (only left by a cycle) so that every edge goes forward.
    dst, src = new[data_dst], new[data_src]
    forward = src < dst
    dst, src, port = dst[forward], src[forward], data_port[forward]
    by_task = np.argsort(dst, kind="stable")  # each task's inputs keep their order
    data_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=data_ptr[1:])
    data = (data_ptr, src[by_task], port[by_task])
    dst, src = new[control_dst], new[control_src]
    forward = src < dst
    pair = _distinct(dst[forward] * n + src[forward])  # by task then predecessor
    control_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(pair // max(n, 1), minlength=n), out=control_ptr[1:])
    out._csr = data + (control_ptr, pair % max(n, 1))
    return out
