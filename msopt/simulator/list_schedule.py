"""Policy auto's own candidates: list schedules of the cost model's op instances, compiled over CSR arrays.

List scheduling in order of the longest remaining path (HEFT's upward rank), each kernel going to
the stream where it would finish first, counting the host's serial kernel launches (which run
ahead of the GPU except across streams), the in-order queue of each stream, a sync plus a
device-to-device copy for each input produced on another stream, and the GPU as a shared
resource (a kernel cannot finish before all work issued so far could have run on the whole GPU,
so spreading kernels that already fill the GPU gains nothing); and the same with whole chains (a
path cover) placed instead of single ops. The graph's arrays, the ranks, the priority order and
the chains depend only on the cost model, so they are built once per cost model and shared by
every stream count.
"""

from __future__ import annotations

import weakref

import numpy as np

from msopt.compiled.jit import compiled
from msopt.graph.order import longest_array, priority_array
from msopt.graph.path_cover import greedy_cover_array
from msopt.simulator.task_arrays import task_figures

_ARRAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # cost model -> its _Arrays


def schedule(cost, streams, chained=False, by_rank=True):
    """{node key: stream} from list scheduling the cost model's op instances on ``streams`` streams.

    With ``chained``, the ops are first cut into chains (a path cover, as policy chains does)
    and only a chain's first op chooses a stream; the rest of the chain follows it. Op by op,
    an early choice that saves a microsecond can pin a whole branch to a busy stream; chains
    keep branches whole, so the two variants win on different graphs. Without ``by_rank`` the
    ops are taken in the cost model's order (TensorFlow's ready order) instead of by priority:
    no heap, for very large graphs.
    """
    keys, _ = cost.tasks.distinct()
    return dict(zip(keys, schedule_streams(cost, streams, chained, by_rank).tolist()))


def schedule_streams(cost, streams, chained=False, by_rank=True):
    """``schedule`` as an int64 array over the run's distinct keys (``cost.tasks.distinct()``), as the auto search
    takes its candidates: no dict of a million keys per candidate."""
    a = arrays(cost)
    target = cost.target
    order = a.priority_order() if by_rank else np.arange(a.n, dtype=np.int64)
    chain_of = a.chains() if chained else np.zeros(0, dtype=np.int64)
    stream_of = np.zeros(a.n, dtype=np.int64)
    _schedule(
        order,
        a.pred_ptr,
        a.pred_idx,
        a.duration,
        a.share,
        a.kernel,
        a.neutral,
        a.out_bytes,
        streams,
        chained,
        chain_of,
        target.launch_us,
        target.sync_us + target.copy_latency_us,
        1.0 / (target.copy_gbs * 1e3),  # microseconds per byte
        target.partition_overhead_us,
        stream_of,
    )
    _, first = cost.tasks.distinct()
    return stream_of[first]


def arrays(cost):
    """The cost model's graph and figures as arrays (built on first use, kept while the cost model lives)."""
    found = _ARRAYS.get(cost)
    if found is None:
        found = _ARRAYS[cost] = _Arrays(cost)
    return found


class _Arrays:
    """The op instances' predecessors (each once, data inputs first, then control) and successors in CSR form,
    their times, and the ranks, priority order and chains once asked for."""

    def __init__(self, cost):
        t = cost.tasks
        self.n = len(t.key)
        self.pred_ptr, self.pred_idx, self.succ_ptr, self.succ_idx = t.neighbour_arrays()
        self.duration, self.share, self.kernel, self.neutral = task_figures(cost)  # the simulator's too
        self.out_bytes = _largest(*cost.output_arrays())
        self._rank = self._order = self._chains = None

    def rank(self):
        """Per op instance, the longest time path from it to a sink, its own time included."""
        if self._rank is None:
            self._rank = longest_array(np.arange(self.n), self.succ_ptr, self.succ_idx, self.duration)
        return self._rank

    def priority_order(self):
        """A topological order that always takes the ready op with the longest path still ahead of it (the
        lowest task id among equals)."""
        if self._order is None:
            self._order = priority_array(np.diff(self.pred_ptr), self.succ_ptr, self.succ_idx, self.rank())
        return self._order

    def chains(self):
        """Chain id per op instance: policy chains' greedy path cover of the instances in task order."""
        if self._chains is None:
            pending = np.diff(self.succ_ptr)
            self._chains = greedy_cover_array(self.pred_ptr, self.pred_idx, pending, np.arange(self.n))
        return self._chains


def _largest(ptr, values):
    """Per task, its largest output's bytes (0 with no output) as float64; task i's outputs are values[ptr[i]:ptr[i + 1]]."""
    counts = np.diff(ptr)
    out = np.zeros(len(counts), dtype=np.int64)
    full = counts > 0
    if full.any():
        out[full] = np.maximum.reduceat(values[: int(ptr[-1])].astype(np.int64), ptr[:-1][full])
    return out.astype(np.float64)


@compiled
def _schedule(
    order,
    pred_ptr,
    pred_idx,
    duration,
    share,
    kernel,
    neutral,
    out_bytes,
    streams,
    chained,
    chain_of,
    launch,
    sync,
    per_byte,
    overhead,
    stream_of,
):
    """Fills ``stream_of``: the list schedule of the tasks taken in ``order`` (see ``schedule``)."""
    n = len(duration)
    finish = np.zeros(n)
    issued = np.zeros(n)  # when the host launched the op (or passed it through)
    free = np.empty(streams)
    for k in range(streams):
        free[k] = k * overhead  # each further executor starts later
    host = 0.0
    work = 0.0  # GPU-microseconds issued so far: nothing finishes before work / 1 GPU
    chains = 0
    for i in range(len(chain_of)):
        if chain_of[i] + 1 > chains:
            chains = chain_of[i] + 1
    chain_work = np.zeros(chains)
    chain_stream = np.full(chains, -1, dtype=np.int64)
    committed = np.zeros(streams)  # when each stream would be done with the chains given to it so far
    if chained:
        for i in range(n):
            c = chain_of[i]
            chain_work[c] = chain_work[c] + duration[i] + (launch if kernel[i] else 0.0)
    choices = np.empty(streams, dtype=np.int64)
    chosen = np.zeros(streams, dtype=np.bool_)
    for k in range(len(order)):
        i = order[k]
        first, last = pred_ptr[i], pred_ptr[i + 1]
        if chained:
            c = chain_of[i]
            if chain_stream[c] < 0:  # a chain's first op: the stream that would finish the whole chain first
                home = _chain_home(first, last, pred_idx, finish, stream_of, neutral, committed, chain_work[c], sync)
                chain_stream[c] = home
                ready = 0.0
                if last > first:
                    ready = finish[pred_idx[first]]
                    for j in range(first + 1, last):
                        if finish[pred_idx[j]] > ready:
                            ready = finish[pred_idx[j]]
                start = committed[home]
                if ready > start:
                    start = ready
                committed[home] = start + chain_work[c]
            choices[0] = chain_stream[c]
            count = 1
        else:  # the streams of its inputs, and the stream idle first
            count = 0
            for j in range(first, last):
                p = pred_idx[j]
                if not neutral[p] and not chosen[stream_of[p]]:
                    chosen[stream_of[p]] = True
                    choices[count] = stream_of[p]
                    count += 1
            idle = 0
            for s in range(1, streams):
                if free[s] < free[idle]:
                    idle = s
            if not chosen[idle]:
                choices[count] = idle
                count += 1
            for q in range(count):
                chosen[choices[q]] = False
        best_s = -1
        best_end = 0.0
        best_apart = False
        best_launched = 0.0
        for q in range(count):
            s = choices[q]
            # The host may launch i once a same-stream input is launched (the stream keeps the order),
            # but must see a cross-stream input done on the device, synced and copied.
            host_ready = 0.0
            device_ready = 0.0
            apart = True  # no input on s
            for j in range(first, last):
                p = pred_idx[j]
                if stream_of[p] == s:
                    apart = False
                if neutral[p] or stream_of[p] == s:
                    if issued[p] > host_ready:
                        host_ready = issued[p]
                    if finish[p] > device_ready:
                        device_ready = finish[p]
                else:
                    arrive = finish[p] + sync + out_bytes[p] * per_byte
                    if arrive > host_ready:
                        host_ready = arrive
            if kernel[i]:
                launched = (host if host > host_ready else host_ready) + launch
                end = free[s]
                if launched > end:
                    end = launched
                if device_ready > end:
                    end = device_ready
                end = end + duration[i]
                if work + duration[i] * share[i] > end:
                    end = work + duration[i] * share[i]
            else:
                launched = host_ready
                end = host_ready
                if device_ready > end:
                    end = device_ready
            if (
                best_s < 0
                or end < best_end
                or (end == best_end and (apart < best_apart or (apart == best_apart and s < best_s)))
            ):
                best_s, best_end, best_apart, best_launched = s, end, apart, launched
        stream_of[i] = best_s
        finish[i] = best_end
        issued[i] = best_launched
        if kernel[i]:
            host = best_launched
            free[best_s] = best_end
            work += duration[i] * share[i]


@compiled
def _chain_home(first, last, pred_idx, finish, stream_of, neutral, committed, work, sync):
    """The stream on which a chain starting after the predecessors ``pred_idx[first:last]`` would end first, given
    the chains already there (the earliest end, then a stream holding one of them, then the lowest number)."""
    best_s = -1
    best_end = 0.0
    best_apart = False
    for s in range(len(committed)):
        ready = 0.0
        apart = True
        for j in range(first, last):
            p = pred_idx[j]
            arrive = finish[p] + (0.0 if neutral[p] or stream_of[p] == s else sync)
            if arrive > ready:
                ready = arrive
            if not neutral[p] and stream_of[p] == s:
                apart = False
        end = committed[s]
        if ready > end:
            end = ready
        end = end + work
        if best_s < 0 or end < best_end or (end == best_end and apart < best_apart):
            best_s, best_end, best_apart = s, end, apart
    return best_s
