"""Discrete-event simulation of one model run on N GPU streams: makespan, syncs, copies, and a bound.

Public API (stable; the rules, the partition report and the visualizer call it):

    from msopt.cost import CostModel
    from msopt.simulate import simulate
    cost_model = CostModel(view, model, target="v100", batch_size=1, costs=None)  # once per model
    result = simulate(view, partition, streams, cost_model)                       # many times, cheap
    result.report()      # {"makespan_ms", "single_stream_ms", "speedup", "lower_bound_ms", "ratio_to_bound",
                         #  "critical_path_ms", "total_work_ms", "host_launch_ms", "syncs", "copies",
                         #  "copy_bytes", "stream_busy_ms": [...], "streams", "target", "batch_size", ...}
    result.makespan_us   # the same figures as attributes, in microseconds
    result.events()      # [{"key", "op", "stream", "start_us", "end_us"}] for every op that launches a kernel
    result.waits         # [{"src", "dst", "src_stream", "dst_stream", "at_us", "ready_us", "bytes"}] per cross-stream
                         #  wait; src and dst are task ids (cost_model.tasks.key[i] is the node key)
    result.start, result.end, result.stream_of   # per task id, microseconds and stream

The partition maps node keys to streams. An op inside a function body that the partition does not
name runs where its caller runs (TensorFlow places a called function's unplaced ops on the call's
device); anything else absent runs on stream 0.

The model of the machine (constants and sources in msopt.host_model and docs/reference.md):
  - Each stream has its own executor (TensorFlow: one per device, each stream a virtual GPU), which
    handles its ops one at a time in the order their inputs become ready on the host, on a thread of
    the inter-op pool (``target.launch_threads`` threads shared by all executors); the run starts the
    executors one after another, ``partition_overhead_us`` apart. Per op it pays
    ``op_overhead_us``; per kernel also the driver's launch, ``launch_us``, of which the share
    ``launch_contention`` holds a context-wide driver resource (one launch at a time across threads).
    A GPU op's output is ready on the host once its kernel is enqueued; a cross-stream input once
    the copy is done.
  - Each stream runs its kernels in launch order, one after another.
  - A cross-stream data edge costs an event sync (``target.sync_us``) and a device-to-device copy
    of the tensor (``copy_latency_us`` + bytes / copy bandwidth), once per tensor and destination
    stream, queued on the producing stream's ``copy_streams`` copy streams (or, with
    ``merge_copy_streams``, on its compute stream, delaying its next kernel); a cross-stream
    control edge costs the sync only. Constants, inputs and variable handles
    are read in place by every stream.
  - The GPU is one shared resource of capacity 1: a kernel alone uses ``share`` of it; when the
    running kernels ask for more than 1 in total, every one slows by the same factor (processor
    sharing, tracked with a virtual clock, so each event costs O(log n)).
"""

import heapq
from collections import deque

from msopt.bound import lower_bound  # noqa: F401  (re-exported: the cost model caches it)
from msopt.gc_pause import gc_paused
from msopt.host_model import host_settings


class Result:
    """The figures and the schedule of one simulated run."""

    def __init__(self, cost_model, streams, stream_of, start, end, waits, syncs, copies, copy_bytes, busy):
        self.cost_model = cost_model
        self.streams = streams
        self.stream_of = stream_of  # per task
        self.start = start  # per task, microseconds
        self.end = end
        self._waits = waits  # tuples (src, dst, src stream, dst stream, at, ready, bytes): small for big graphs
        self.syncs = syncs
        self.copies = copies
        self.copy_bytes = copy_bytes
        self.busy_us = busy  # per stream: time some kernel of the stream ran
        self.makespan_us = max(end, default=0.0)

    @property
    def single_stream_us(self):
        return self.cost_model.single_stream_us()

    @property
    def lower_bound_us(self):
        return self.bound()["lower_bound_us"]

    def bound(self):
        """The cost model's bound, tightened for this stream count by msopt.bound (serial streams, cuts)."""
        from msopt.bound import tightened

        return tightened(self.cost_model.lower_bound(self.streams), self.cost_model, self.streams)

    @property
    def waits(self):
        """One record per cross-stream wait: the producer's and consumer's task ids and streams, when the
        producer's data existed (at_us), when it was usable on the consumer's stream (ready_us), bytes copied."""
        names = ("src", "dst", "src_stream", "dst_stream", "at_us", "ready_us", "bytes")
        return [dict(zip(names, w)) for w in self._waits]

    def events(self):
        """One record per executed op that launches a kernel, in start order."""
        cm = self.cost_model
        keys, ops = cm.tasks.key, cm.tasks.op
        rows = [
            {
                "key": keys[i],
                "op": ops[i],
                "stream": self.stream_of[i],
                "start_us": self.start[i],
                "end_us": self.end[i],
            }
            for i in range(len(keys))
            if cm.kernel[i]
        ]
        rows.sort(key=lambda r: (r["start_us"], r["stream"]))
        return rows

    def report(self):
        cm = self.cost_model
        bound = self.bound()
        target = cm.target
        single = self.single_stream_us
        ms = lambda us: round(us / 1000.0, 6)  # noqa: E731
        return {
            "target": cm.target.name,
            "batch_size": cm.batch_size,
            "signature": cm.signature,
            "streams": self.streams,
            "makespan_ms": ms(self.makespan_us),
            "single_stream_ms": ms(single),
            "speedup": round(single / self.makespan_us, 4) if self.makespan_us > 0 else 1.0,
            "lower_bound_ms": ms(bound["lower_bound_us"]),
            "ratio_to_bound": round(self.makespan_us / bound["lower_bound_us"], 4)
            if bound["lower_bound_us"] > 0
            else 1.0,
            "critical_path_ms": ms(bound["critical_path_us"]),
            "total_work_ms": ms(bound["total_work_us"]),
            "host_launch_ms": ms(bound["host_launch_us"]),
            "serial_streams_ms": ms(bound["serial_streams_us"]),
            "cut_ms": ms(bound["cut_us"]),
            "launch_threads": min(len(set(self.stream_of)) or 1, target.launch_threads),  # threads that launched
            "host": host_settings(target),
            "syncs": self.syncs,
            "copies": self.copies,
            "copy_bytes": self.copy_bytes,
            "stream_busy_ms": [ms(b) for b in self.busy_us],
            "ops_run": len(cm),
            "kernels": sum(cm.kernel),
            "ops_with_unknown_shape": cm.unknown_shapes,
            "ops_measured": cm.measured,
        }


def streams_of(cost_model, partition):
    """Each task's stream: its own entry, else its caller's (recursively), else 0."""
    t = cost_model.tasks
    inst_stream = [0] * len(t.instances)
    for k, (call_key, parent) in enumerate(t.instances):
        if k == 0:
            continue
        inst_stream[k] = partition.get(call_key, inst_stream[parent])  # parents precede children
    get = partition.get
    return [get(key, inst_stream[inst]) for key, inst in zip(t.key, t.instance)]


def simulate(view, partition, streams, cost_model):
    """Simulate one run of ``cost_model``'s tasks with ``partition`` over ``streams`` streams -> Result."""
    stream_of = streams_of(cost_model, partition)
    for key, s in zip(cost_model.tasks.key, stream_of):
        if not isinstance(s, int) or not 0 <= s < streams:
            raise ValueError(f"node '{key}' is on stream {s}, outside [0, {streams})")
    with gc_paused():
        return _run(cost_model, streams, stream_of, record_waits=True)


def _run(cm, streams, stream_of, record_waits, requests=None):
    """One run; ``requests`` (msopt.concurrency.Requests) runs several requests in flight: its own executors per
    request (``executor_of``), sources gated until ``requests.done`` releases them, the streams shared."""
    t, target = cm.tasks, cm.target
    n = len(t.key)
    duration, share, kernel, neutral, out_bytes = cm.duration, cm.share, cm.kernel, cm.neutral, cm.out_bytes
    succ, preds = cm.successors(), cm.pred_count()
    launch, sync, overhead = target.launch_us, target.sync_us, target.op_overhead_us
    serial = target.launch_contention * launch  # held on the driver's context-wide resource
    own = launch - serial  # on the launching thread alone
    copy_fixed, copy_rate = target.copy_latency_us, target.copy_gbs * 1e3  # bytes per microsecond
    inf = float("inf")

    # An edge i -> j is "local" when both ops share a stream or i is read in place (a constant, an input):
    # j may be launched once i is launched. Otherwise j waits on the host for i's data on the device,
    # plus the event sync and the copy.
    host_pending = list(preds) if requests is None else [p + g for p, g in zip(preds, requests.gate)]
    device_pending = [p + 1 if not kernel[i] else 0 for i, p in enumerate(preds)]  # no-kernel ops: inputs on device
    host_ready = [0.0] * n
    device_ready = [0.0] * n  # for a no-kernel op: when its inputs (hence its outputs) exist on the device
    start = [0.0] * n
    end = [0.0] * n
    transfers = {}  # (src task, port or -1 for control, dst stream) -> arrival time
    waits = []
    moved = [0, 0]  # copies, bytes

    host = [(0.0, i) for i in range(n) if host_pending[i] == 0]
    heapq.heapify(host)
    executor_of, executors = (stream_of, streams) if requests is None else (requests.executor_of, requests.executors)
    active = streams if requests is None else requests.active  # executors that may run at once
    pool = [0.0] * max(1, min(target.launch_threads, active))  # when each inter-op thread is next free (a heap)
    executor_free = [0.0] * executors  # each stream's executor handles one op at a time
    backlog = [deque() for _ in range(executors)]  # ops ready while their executor was busy, in ready order
    waking = [False] * executors  # a wake-up of the executor is in the host heap (task id -1 - executor)
    for rank, s in enumerate(sorted(set(stream_of)) if requests is None else ()):  # one executor per stream,
        executor_free[s] = rank * target.partition_overhead_us  # the run starts them one after another
    driver = [0.0]  # when the driver's context-wide launch resource is next free
    merge = target.merge_copy_streams
    copy_lanes = [[0.0] * target.copy_streams for _ in range(streams)] if target.copy_streams > 0 else None
    stream_block = [0.0] * streams  # merged copies: the compute stream is busy copying until then
    queue = [[] for _ in range(streams)]  # per stream: launched kernels in launch order
    qhead = [0] * streams
    stream_busy = [False] * streams
    busy_total = [0.0] * streams
    waiting_streams = []  # streams that got a launch while possibly idle
    running = []  # (virtual finish, task)
    demand = 0.0
    vclock = 0.0
    now = 0.0
    starts = []  # (time, task): kernels whose start time is known
    done = 0

    def satisfy(j, at):
        if at > host_ready[j]:
            host_ready[j] = at
        host_pending[j] -= 1
        if host_pending[j] == 0:
            heapq.heappush(host, (host_ready[j], j))

    def on_host(i, at):
        """i's outputs are known to the host at ``at`` (launched, or passed through)."""
        s = stream_of[i]
        local = neutral[i]
        for j, _port in succ[i]:
            if local or stream_of[j] == s:
                satisfy(j, at)

    def on_device(first, at):
        """first's outputs exist on the device at ``at`` (a worklist: pass-through ops chain on)."""
        work = [(first, at)]
        while work:
            i, at = work.pop()
            s = stream_of[i]
            local = neutral[i]
            for j, port in succ[i]:
                sj = stream_of[j]
                if not (local or sj == s):
                    key = (i, port, sj)
                    ready = transfers.get(key)
                    if ready is None:
                        nbytes = out_bytes[i][port] if 0 <= port < len(out_bytes[i]) else 0
                        ready = at + sync
                        if port >= 0:
                            ready = sync + copy_done(s, at, copy_fixed + nbytes / copy_rate)
                        transfers[key] = ready
                        if port >= 0:
                            moved[0] += 1
                            moved[1] += nbytes
                        if record_waits:
                            waits.append((i, j, s, sj, at, ready, nbytes if port >= 0 else 0))
                    satisfy(j, ready)
                if not kernel[j]:
                    if at > device_ready[j]:
                        device_ready[j] = at
                    device_pending[j] -= 1
                    if device_pending[j] == 0:
                        end[j] = device_ready[j]
                        work.append((j, device_ready[j]))

    def released(opened):
        """Requests released at ``at``: their executors' start times, then their gated sources."""
        for at, tasks, starts in opened:
            for e, free in starts:
                executor_free[e] = free
            for j in tasks:
                satisfy(j, at)

    if requests is not None:
        released(requests.done(None, 0.0))

    def copy_done(s, at, took):
        """When a copy of ``took`` microseconds, issued by stream ``s`` at ``at``, is done."""
        if merge:  # on the compute stream: the stream's next kernel waits for it
            begin = at if at > stream_block[s] else stream_block[s]
            stream_block[s] = begin + took
            return begin + took
        if copy_lanes is None:
            return at + took
        lanes = copy_lanes[s]
        begin = at if at > lanes[0] else lanes[0]
        heapq.heapreplace(lanes, begin + took)
        return begin + took

    while done < n:
        # Each stream's executor handles, one at a time, every op whose inputs it knows ready (it never
        # waits for the GPU), on a thread of the inter-op pool.
        while host and host[0][0] <= now:
            ready, i = heapq.heappop(host)
            woken = i < 0
            if woken:  # an executor is free: it takes the oldest op waiting for it
                e = -1 - i
                i = backlog[e].popleft()
                waking[e] = False
            s, e = stream_of[i], executor_of[i]
            if kernel[i] or overhead > 0:
                if not woken and (backlog[e] or executor_free[e] > ready):  # the executor is busy: wait in line
                    backlog[e].append(i)
                    if not waking[e]:
                        waking[e] = True
                        heapq.heappush(host, (executor_free[e], -1 - e))
                    continue
                if pool[0] > ready:  # every pool thread is busy (fewer threads than streams): back when one is free
                    if woken:  # the executor keeps its place: its oldest op stays first in line
                        backlog[e].appendleft(i)
                        waking[e] = True
                        heapq.heappush(host, (pool[0], -1 - e))
                    else:
                        heapq.heappush(host, (pool[0], i))
                    continue
                handled = ready + overhead
            if kernel[i]:
                host_free = handled + own
                if serial > 0:
                    host_free = (host_free if host_free > driver[0] else driver[0]) + serial
                    driver[0] = host_free
                executor_free[e] = host_free
                heapq.heapreplace(pool, host_free)
                if backlog[e] and not waking[e]:
                    waking[e] = True
                    heapq.heappush(host, (host_free, -1 - e))
                queue[s].append((host_free, i))
                waiting_streams.append(s)
                on_host(i, host_free)
            else:
                if overhead > 0:
                    executor_free[e] = handled
                    heapq.heapreplace(pool, handled)
                    ready = handled
                    if backlog[e] and not waking[e]:
                        waking[e] = True
                        heapq.heappush(host, (handled, -1 - e))
                start[i] = ready
                done += 1
                if requests is not None:
                    released(requests.done(i, ready))
                on_host(i, ready)
                if ready > device_ready[i]:
                    device_ready[i] = ready
                device_pending[i] -= 1
                if device_pending[i] == 0:
                    end[i] = device_ready[i]
                    on_device(i, device_ready[i])
        # Idle streams start their next launched kernel (at its launch time or now).
        for s in waiting_streams:
            if not stream_busy[s] and qhead[s] < len(queue[s]):
                at, i = queue[s][qhead[s]]
                qhead[s] += 1
                stream_busy[s] = True
                heapq.heappush(starts, (max(at, now, stream_block[s]), i))
        waiting_streams.clear()
        # Advance to the next event: a kernel ends, a kernel starts, or the host finds an op ready.
        rate = 1.0 / demand if demand > 1.0 else 1.0
        t_end = now + (running[0][0] - vclock) / rate if running else inf
        t_start = starts[0][0] if starts else inf
        t_host = host[0][0] if host else inf
        t_next = min(t_end, t_start, t_host)
        if t_next == inf:
            if done < n:
                raise RuntimeError("simulation stalled: a dependency is never satisfied")
            break
        if t_next > now:
            vclock += (t_next - now) * rate
            now = t_next
        if running and t_end <= t_start and t_end <= t_host:
            _, i = heapq.heappop(running)
            demand = demand - share[i] if running else 0.0
            s = stream_of[i]
            stream_busy[s] = False
            busy_total[s] += now - start[i]
            end[i] = now
            done += 1
            waiting_streams.append(s)
            on_device(i, now)
            if requests is not None:
                released(requests.done(i, now))
        elif starts and t_start <= t_host:
            _, i = heapq.heappop(starts)
            start[i] = now
            demand += share[i]
            heapq.heappush(running, (vclock + duration[i], i))
    return Result(cm, streams, stream_of, start, end, waits, len(transfers), moved[0], moved[1], busy_total)


def single_stream(cost_model):
    """The run with every op on stream 0."""
    with gc_paused():
        return _run(cost_model, 1, [0] * len(cost_model), record_waits=False)


__all__ = ["simulate", "single_stream", "lower_bound", "streams_of", "Result"]
