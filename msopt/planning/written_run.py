"""The run of a plan as emit writes it: the cost model's tasks plus each copied constant's per-stream copies.

With Const copies (msopt.planning.const_copies), the written model has, for every copied Const
and stream, a copy on that stream read by that stream's consumers instead of the original (msopt.emit).
Each copy is one more op instance its stream's executor handles, which the host model times, so the
partition report simulates the run as written. ``as_written`` derives that run from the plan's own cost
model in memory, the way emit rewires the graph, instead of loading, flattening and costing the written
model again. A copy is created where flat_run would create it (emit appends it to its body: after the
tasks of its call instance) and the run is renumbered by flat's own walk, so ids and order are the
reload's; it has its original's shapes and launches nothing. A flattened data edge from a copied Const
moves to the copy when the view node reading the Const (the consumer itself, or the call it runs in)
is assigned that copy's stream.
"""

from types import SimpleNamespace

import numpy as np

from msopt.emit import copy_name
from msopt.graph.flat import signature_roots
from msopt.graph.run_order import renumber
from msopt.graph.tasks import Tasks, gather, op_codes
from msopt.simulator.simulate import simulate


def as_written(cost_model, partition, copies, roots=None):
    """(cost model, partition) of the model written with ``copies`` ({Const key: [streams]}); the plan's own
    when nothing is copied. The partition gains each copy's stream. ``roots`` (main-graph keys the run goes back
    from, msopt.graph.flat.signature_roots; None: the whole main graph runs) prunes the main graph as flat_run does:
    a copy nobody in the run reads is not run, nor is an original Const left without readers."""
    t = cost_model.tasks
    keys = t.key
    copied = [i for i, key in enumerate(keys) if key in copies] if copies else []
    if not copied:
        return cost_model, partition
    n = len(keys)
    # Slots: every task, each copied one followed by its copies (one per stream, ascending).
    extra = np.zeros(n, np.int64)
    extra[copied] = [len(copies[keys[i]]) for i in copied]
    base = np.arange(n, dtype=np.int64) + np.cumsum(extra) - extra
    total = n + int(extra.sum())
    of_slot = np.repeat(np.arange(n, dtype=np.int64), extra + 1)  # the task a slot is or copies
    copy_rank = _within(extra + 1)  # 0: the task itself, r + 1: its copy for stream copies[key][r]
    data_ptr, data_src, data_port, control_ptr, control_src = t.csr()
    data_dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(data_ptr))
    control_dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(control_ptr))
    src = base[data_src]
    leaving = np.flatnonzero(extra[data_src] > 0)  # edges leaving a copied Const
    moved, to = [], []
    get, instance = partition.get, t.instance
    for e, i, j, first in zip(
        leaving.tolist(), data_src[leaving].tolist(), data_dst[leaving].tolist(), base[data_src[leaving]].tolist()
    ):  # read as lists: an element of an array costs more to read or write than the work per edge
        reader = keys[j] if instance[i] == instance[j] else _view_reader(t, i, j)  # most read in their own body
        streams = copies[keys[i]]
        stream = get(reader) if reader is not None else None
        if stream in streams:
            moved.append(e)
            to.append(first + 1 + streams.index(stream))
    src[moved] = to
    keep = np.ones(total, bool)
    if roots is not None:  # the main graph runs back from the roots: unread copies and originals do not run
        root_set = set(roots)
        in_main = np.zeros(n, bool)  # a copied task of the main graph
        in_main[copied] = np.asarray(t.instance, np.int64)[copied] == 0
        is_root = np.zeros(n, np.int64)
        is_root[[i for i in copied if keys[i] in root_set]] = 1
        keep[in_main[of_slot] & (copy_rank >= is_root[of_slot])] = False  # the copies, and an original not a root
        keep[src] = True
        keep[base[control_src]] = True
    made = _creation_order(t, base, of_slot, copy_rank, keep)
    created = np.empty(total, np.int64)
    created[made] = np.arange(len(made), dtype=np.int64)

    made_copies = [  # (slot, key, stream) of each copy, in slot order
        (slot, copy_name(keys[i], stream), stream)
        for i, first in zip(copied, base[copied].tolist())
        for slot, stream in enumerate(copies[keys[i]], first + 1)
    ]
    copy_slots, copy_keys, copy_streams = zip(*made_copies)
    tasks_made = of_slot[made]
    made_keys = np.asarray(keys, dtype=object)[tasks_made]  # each task's key; a copy's is set below
    slot_keys = np.empty(total, dtype=object)
    slot_keys[list(copy_slots)] = copy_keys
    is_copy = copy_rank[made] > 0
    made_keys[is_copy] = slot_keys[made[is_copy]]
    ops = gather(t.op, tasks_made)  # a copy takes its original's value
    built = SimpleNamespace(
        key=made_keys.tolist(),
        op=ops,
        instance=gather(t.instance, tasks_made),
        node=gather(t.node, tasks_made) if "node" in t.__dict__ else [None] * len(made),
        op_codes=op_codes(ops),
        instances=t.instances,
    )
    written = Tasks()
    written.instances = t.instances
    data = (created[base[data_dst]], created[src], data_port)
    renumber(written, built, data, (created[base[control_dst]], created[base[control_src]]))
    original = tasks_made[written.created]  # per task of the written run, the task whose figures it takes

    model = cost_model.with_tasks(written, original)
    # A copy is a Const no costs file names (its name is new): it launches nothing, even if its original was timed.
    for i in np.flatnonzero(copy_rank[made][written.created] > 0).tolist():
        model.duration[i], model.share[i], model.kernel[i], model.flops[i] = 0.0, 0.0, False, 0.0
    placed = dict(partition)
    placed.update(zip(copy_keys, copy_streams))
    return model, placed


def simulated_as_written(view, model, cost_model, partition, copies, streams):
    """(cost model, partition, simulate.Result) of the run as written with ``copies`` (``as_written``, the main graph
    run back from ``model``'s signature roots), simulated on ``streams`` streams."""
    roots = signature_roots(view, model, cost_model.signature)[1]
    run, placed = as_written(cost_model, partition, copies, roots)
    return run, placed, simulate(view, placed, streams, run)


def _creation_order(tasks, base, of_slot, copy_rank, keep):
    """The kept slots in the order flat_run creates the written model's tasks: emit appends a body's copies
    to its end, so they come after every task of their call instance and of the instances it opens (all
    created together, depth first), in the order of their originals."""
    created = np.asarray(getattr(tasks, "created", np.arange(len(tasks.key))), np.int64)
    instance = np.asarray(tasks.instance, np.int64)
    last = np.full(len(tasks.instances), -1, np.int64)
    np.maximum.at(last, instance, created)
    for k in range(len(tasks.instances) - 1, 0, -1):  # a child instance is numbered after its parent
        parent = tasks.instances[k][1]
        last[parent] = max(last[parent], last[k])
    own = created[of_slot]
    is_copy = copy_rank > 0
    anchor = np.where(is_copy, last[instance[of_slot]], own)
    kept = np.flatnonzero(keep)
    return kept[np.lexsort((copy_rank[kept], np.where(is_copy, own, -1)[kept], anchor[kept]))]


def _view_reader(tasks, i, j):
    """The view node that reads task ``i``'s node for the flattened edge i -> j: j's own node in ``i``'s call
    instance, else the call in that instance that j runs under; None if j is not under it (a returned value)."""
    home, k = tasks.instance[i], tasks.instance[j]
    if k == home:
        return tasks.key[j]
    while k:
        call, parent = tasks.instances[k]
        if parent == home:
            return call
        k = parent
    return None


def _within(widths):
    """0, 1, ..., w - 1 for each width ``w``, concatenated."""
    ends = np.cumsum(widths)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(ends - widths, widths)
