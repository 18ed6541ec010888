"""The simulator's event loop as plain Python, as it was before it was compiled: the reference the tests compare with.

``run(cm, streams, stream_of, record_waits, requests)`` is msopt.simulator.simulate's former ``_run``, unchanged but for
returning its raw figures; ``Copies`` and ``Requests`` are msopt.simulator.concurrency's former request loop.
"""

import copy
import heapq
from collections import deque


def run(cm, streams, stream_of, record_waits, requests=None):
    """One run; ``requests`` (msopt.simulator.concurrency.Requests) runs several requests in flight: its own executors per
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
    return {
        "start": start,
        "end": end,
        "waits": waits,
        "syncs": len(transfers),
        "copies": moved[0],
        "copy_bytes": moved[1],
        "busy": busy_total,
        "makespan": max(end, default=0.0),
    }


class Copies:
    """R copies of a cost model's tasks, in the shape msopt.simulator.simulate's event loop reads (task i of copy r is
    r * n + i)."""

    def __init__(self, cost_model, copies):
        n = len(cost_model)
        self.target = cost_model.target
        self.tasks = type("Tasks", (), {"key": cost_model.tasks.key * copies})()
        self.duration = cost_model.duration * copies
        self.share = cost_model.share * copies
        self.kernel = cost_model.kernel * copies
        self.neutral = cost_model.neutral * copies
        self.out_bytes = cost_model.out_bytes * copies
        succ = cost_model.successors()
        self._succ = [[(j + r * n, port) for j, port in row] for r in range(copies) for row in succ]
        self._preds = cost_model.pred_count() * copies

    def successors(self):
        return self._succ

    def pred_count(self):
        return self._preds

    def on(self, target):
        """The same copies under another host (a corner of the host box)."""
        other = copy.copy(self)
        other.target = target
        return other


class Requests:
    """The closed loop: which executor runs each task, which tasks wait for their request's release, and
    ``done(task, at)``, called by the event loop as each task completes, which issues the next request."""

    def __init__(self, stream_of, preds, copies, concurrency, streams, partition_overhead_us):
        n = len(stream_of)
        self.n, self.copies, self.concurrency, self.streams = n, copies, concurrency, streams
        self.executor_of = [r * streams + s for r in range(copies) for s in stream_of]
        self.executors = copies * streams
        used = sorted(set(stream_of))
        self.active = min(concurrency, copies) * len(used)  # executors that may run at once
        self._sources = [i for i, p in enumerate(preds) if p == 0]  # a request's tasks without inputs
        self.gate = [1 if p == 0 else 0 for p in preds] * copies  # ... wait for the request to be issued
        self._ranks = [(s, rank * partition_overhead_us) for rank, s in enumerate(used)]  # executors start apart
        self.remaining = [n] * copies
        self.issued = [0.0] * copies
        self.finished = [0.0] * copies
        self.next = 0

    def _issue(self, at):
        r = self.next
        self.next += 1
        self.issued[r] = at
        base = r * self.n
        starts = [(r * self.streams + s, at + offset) for s, offset in self._ranks]
        return (at, [base + i for i in self._sources], starts)

    def done(self, i, at):
        """[(time, tasks to release, [(executor, start time)])] for the requests issued by this completion."""
        if i is None:  # the start: ``concurrency`` requests at once
            return [self._issue(at) for _ in range(min(self.concurrency, self.copies))]
        r = i // self.n
        if at > self.finished[r]:
            self.finished[r] = at
        self.remaining[r] -= 1
        if self.remaining[r] or self.next >= self.copies:
            return ()
        return [self._issue(self.finished[r])]
