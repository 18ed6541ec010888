"""The simulator's event loop, compiled: flat arrays in (msopt.simulator.simulate prepares them), start/end times and figures out."""

import numpy as np

from msopt.compiled.jit import compiled

# Slots of the int64 counters array.
SYNCS, COPIES, COPY_BYTES, WAITS, NEXT_REQUEST = range(5)

# The loop is one function: every compiled call that passes arrays costs reference counting (~25 ns per array),
# more than the work of most events, so only the rare request issue is a call; the heaps are inlined.
# Keep the heaps here too: numba's on-disk cache notices a change of this file only, not of the files it calls.


@compiled(inline=True)
def push(heap, size, key, ident):
    """Push (key, ident) on the binary heap heap[:size] (rows: key, id as a float) in (key, id) order; the size."""
    k = size
    while k > 0:
        parent = (k - 1) >> 1
        pk, pi = heap[parent, 0], heap[parent, 1]
        if key < pk or (key == pk and ident < pi):
            heap[k, 0], heap[k, 1] = pk, pi
            k = parent
        else:
            break
    heap[k, 0], heap[k, 1] = key, ident
    return size + 1


@compiled(inline=True)
def pop(heap, size):
    """Remove the heap's least (key, id), which the caller read at [0]; the new size."""
    size -= 1
    key, ident = heap[size, 0], heap[size, 1]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (
            heap[right, 0] < heap[child, 0] or (heap[right, 0] == heap[child, 0] and heap[right, 1] < heap[child, 1])
        ):
            child = right
        ck, ci = heap[child, 0], heap[child, 1]
        if ck < key or (ck == key and ci < ident):
            heap[k, 0], heap[k, 1] = ck, ci
            k = child
        else:
            break
    if size > 0:
        heap[k, 0], heap[k, 1] = key, ident
    return size


@compiled(inline=True)
def compact(q, size, skip):
    """Drop the stale task entries (``skip`` counts them per task) from the heap q[:size] (rows: 0, id); the size."""
    kept = 0
    for k in range(size):
        ident = q[k, 1]
        if ident >= 0 and skip[int(ident)] > 0:
            skip[int(ident)] -= 1
        else:
            kept = push(q, kept, 0.0, ident)  # kept <= k: rebuilt in place, over the entries already read
    return kept


@compiled(inline=True)
def replace_least(values, row, value):
    """heapq.heapreplace on the heap of floats values[row]: its least value gives way to ``value``."""
    size = values.shape[1]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        if child + 1 < size and values[row, child + 1] < values[row, child]:
            child += 1
        if values[row, child] < value:
            values[row, k] = values[row, child]
            k = child
        else:
            break
    values[row, k] = value


@compiled
def _issue(at, req, executor_free, counters, issued, host_ready, host_pending, heap, hsize):
    """The next request starts at ``at``: its executors one after another, then its sources."""
    period, stride, sources, rank_streams, rank_offsets = req
    r = counters[NEXT_REQUEST]
    counters[NEXT_REQUEST] = r + 1
    issued[r] = at
    for k in range(rank_streams.shape[0]):
        executor_free[r * stride + rank_streams[k]] = at + rank_offsets[k]
    for k in range(sources.shape[0]):
        j = r * period + sources[k]
        if at > host_ready[j]:
            host_ready[j] = at
        host_pending[j] -= 1
        if host_pending[j] == 0:
            hsize = push(heap, hsize, host_ready[j], j)
    return hsize


@compiled
def run(g, duration, share, executor_of, executors, active, streams, req, concurrency, host, ints, record_waits):
    """The event loop of msopt.simulator.simulate (its docstring describes the machine); arguments as msopt.simulator.simulate builds them.

    g: (CSR successor pointers, consumers, ports (-1 control), bytes per edge, stream per task, kernel, neutral);
    req: (tasks per request, executors per request, source tasks of a request, its streams, their start offsets),
    copies = len(tasks) // tasks per request; host: (launch, sync, op overhead, contention, copy latency,
    copy rate in bytes per microsecond); ints: (launch threads, copy streams, merge copy streams).
    Returns (start, end, busy per stream, counters, waits ints, waits floats, issued, finished, stalled)."""
    ptr, dst, port_of, nbytes_of, stream_of, kernel, neutral = g
    period, sources = req[0], req[2]
    launch, sync, overhead, contention, copy_fixed, copy_rate = host[0], host[1], host[2], host[3], host[4], host[5]
    launch_threads, copy_streams, merge = ints[0], ints[1], ints[2] != 0
    n = stream_of.shape[0]
    copies = n // period if period > 0 else 0
    serial = contention * launch  # held on the driver's context-wide resource
    own = launch - serial  # on the launching thread alone
    inf = np.inf

    # An edge i -> j is "local" when both ops share a stream or i is read in place (a constant, an input):
    # j may be launched once i is launched. Otherwise j waits on the host for i's data on the device,
    # plus the event sync and the copy.
    # Per-task state, 40 bytes a task in one block: three times, then four int32 counts and links. Two of the
    # times are kept where they are written later anyway (see start and end). One block: a large block is mapped
    # apart by the allocator and given back when freed, where many separate arrays may stay with the thread that
    # ran the loop (msopt.compiled.side_by_side runs loops on a second thread).
    block = np.zeros(5 * n)
    host_ready = block[:n]
    start = block[n : 2 * n]  # a kernel's launch time until it starts
    end = block[2 * n : 3 * n]  # a no-kernel op's latest input on the device so far, until it ends then
    links = block[3 * n :].view(np.int32)
    host_pending = links[:n]  # inputs (edges in) not yet known ready on the host
    device_pending = links[n : 2 * n]
    bl_next = links[2 * n : 3 * n]  # ops ready while their executor was busy, in ready order (see bl_head)
    q_next = links[3 * n :]  # per stream: launched kernels in launch order (see q_head)
    for k in range(dst.shape[0]):
        host_pending[dst[k]] += 1
    for i in range(n):
        if not kernel[i]:
            device_pending[i] = host_pending[i] + 1  # no-kernel ops: inputs on the device, and handled
    for r in range(copies):
        for k in range(sources.shape[0]):
            host_pending[r * period + sources[k]] += 1  # gated until their request is issued
    bl_next[:] = -1
    q_next[:] = -1
    max_port = -1
    for k in range(port_of.shape[0]):
        max_port = max(max_port, port_of[k])
    stamp = np.full((max_port + 2) * streams, -1, np.int64)  # the transfers of the op being done: (port, stream)
    arrival = np.zeros((max_port + 2) * streams)
    work_i = np.empty(n + 1, np.int64)  # ops whose outputs reached the device, to pass on (a worklist)
    work_f = np.empty(n + 1)
    top = 0
    edges = dst.shape[0] if record_waits else 0
    waits_i = np.empty((edges, 5), np.int64)
    waits_f = np.empty((edges, 2))
    counters = np.zeros(5, np.int64)

    heap = np.empty((n + executors + 1, 2))  # the host heap: (time, task), or (time, -1 - executor) to wake one
    hsize = 0
    # Ops and executors waiting for an inter-op thread. In the heap each would be due at pool[0, 0] (the pool's
    # next free time, which only grows) and be pushed again at the next one each time a thread frees: with more
    # executors than threads (requests in flight x streams), that is every waiting op at every launch. Here they wait
    # apart, by id (the heap's order among equal times), all due at pool[0, 0]; an executor that takes a thread
    # sends its other waiting ops back to the heap at that time, where they find it busy, as they would have.
    # Made at the first wait (single runs rarely have one).
    wait_q = np.zeros((1, 2))  # a heap of (0, id): task i, or -1 - e for executor e's oldest op
    qsize = 0
    wait_state = np.zeros(1, np.int32)  # 1: the task waits in wait_q
    wait_skip = np.zeros(1, np.int32)  # the task's entries left in wait_q after it went back to the heap
    wait_next = np.full(1, -1, np.int32)  # per executor, its tasks in wait_q (see wait_first)
    wait_first = np.full(executors, -1, np.int64)
    pool = np.zeros((1, max(1, min(launch_threads, active))))  # when each inter-op thread is next free (a heap)
    executor_free = np.zeros(executors)  # each executor handles one op at a time
    bl_head = np.full(executors, -1, np.int64)  # ops ready while their executor was busy, in ready order
    bl_tail = np.full(executors, -1, np.int64)
    waking = np.zeros(executors, np.bool_)  # a wake-up of the executor is in the host heap
    driver = 0.0  # when the driver's context-wide launch resource is next free
    lanes = np.zeros((streams, max(copy_streams, 0)))  # each stream's copy streams: when next free (heaps)
    stream_block = np.zeros(streams)  # merged copies: the compute stream is busy copying until then
    q_head = np.full(streams, -1, np.int64)  # per stream: launched kernels in launch order
    q_tail = np.full(streams, -1, np.int64)
    stream_busy = np.zeros(streams, np.bool_)
    busy_total = np.zeros(streams)
    waiting = np.zeros(streams, np.bool_)  # streams that got a launch or ended a kernel: may start the next
    starts = np.empty((streams + 1, 2))  # kernels whose start time is known: (time, task)
    ssize = 0
    running = np.empty((streams + 1, 2))  # (virtual finish, task)
    rsize = 0
    demand = 0.0
    vclock = 0.0
    now = 0.0
    done = 0
    remaining = np.full(copies, period, np.int64)
    issued = np.zeros(copies)
    finished = np.zeros(copies)
    stalled = False
    for _ in range(min(concurrency, copies)):  # the first requests start together
        hsize = _issue(0.0, req, executor_free, counters, issued, host_ready, host_pending, heap, hsize)

    while True:
        check_done, every_task_done = True, False
        while True:
            # Outputs that reached the device: cross-stream consumers get them after the sync and the copy
            # (once per tensor and destination stream), pass-through ops (no kernel) chain on.
            while top > 0:
                top -= 1
                i, at = work_i[top], work_f[top]
                s = stream_of[i]
                local = neutral[i]
                for k in range(ptr[i], ptr[i + 1]):
                    j, port = dst[k], port_of[k]
                    sj = stream_of[j]
                    known = at
                    if not (local or sj == s):
                        slot = (port + 1) * streams + sj
                        if stamp[slot] == i:
                            known = arrival[slot]
                        else:
                            nbytes = nbytes_of[k]
                            known = at + sync
                            if port >= 0:
                                took = copy_fixed + nbytes / copy_rate
                                if merge:  # on the compute stream: the stream's next kernel waits for it
                                    begin = at if at > stream_block[s] else stream_block[s]
                                    stream_block[s] = begin + took
                                elif copy_streams > 0:  # on the first free copy stream
                                    begin = at if at > lanes[s, 0] else lanes[s, 0]
                                    replace_least(lanes, s, begin + took)
                                else:
                                    begin = at
                                known = sync + (begin + took)
                                counters[COPIES] += 1
                                counters[COPY_BYTES] += nbytes
                            stamp[slot], arrival[slot] = i, known
                            counters[SYNCS] += 1
                            w = counters[WAITS]
                            if w < waits_i.shape[0]:  # recorded when asked (room for one per edge)
                                waits_i[w, 0], waits_i[w, 1], waits_i[w, 2], waits_i[w, 3] = i, j, s, sj
                                waits_i[w, 4] = nbytes if port >= 0 else 0
                                waits_f[w, 0], waits_f[w, 1] = at, known
                                counters[WAITS] = w + 1
                        if known > host_ready[j]:
                            host_ready[j] = known
                        host_pending[j] -= 1
                        if host_pending[j] == 0:
                            hsize = push(heap, hsize, host_ready[j], j)
                    if not kernel[j]:
                        if at > end[j]:
                            end[j] = at
                        device_pending[j] -= 1
                        if device_pending[j] == 0:
                            work_i[top], work_f[top] = j, end[j]
                            top += 1
            if check_done:
                check_done = False
                if done >= n:
                    every_task_done = True
                    break
            # Each executor handles, one at a time, every op whose inputs it knows ready (it never waits for
            # the GPU), on a thread of the inter-op pool.
            while qsize > 0 and wait_q[0, 1] >= 0 and wait_skip[int(wait_q[0, 1])] > 0:  # moved back to the heap
                wait_skip[int(wait_q[0, 1])] -= 1
                qsize = pop(wait_q, qsize)
            queued = qsize > 0 and (
                hsize == 0 or pool[0, 0] < heap[0, 0] or (pool[0, 0] == heap[0, 0] and wait_q[0, 1] < heap[0, 1])
            )
            if queued:
                if pool[0, 0] > now:
                    break
                ready, ident = pool[0, 0], wait_q[0, 1]
                qsize = pop(wait_q, qsize)
                if ident >= 0:
                    wait_state[int(ident)] = 0
            else:
                if hsize == 0 or heap[0, 0] > now:
                    break
                ready, ident = heap[0, 0], heap[0, 1]
                hsize = pop(heap, hsize)
            woken = ident < 0
            if woken:  # an executor is free: it takes the oldest op waiting for it
                e = -1 - int(ident)
                i = bl_head[e]
                bl_head[e] = bl_next[i]
                if bl_head[e] < 0:
                    bl_tail[e] = -1
                waking[e] = False
            else:
                i = int(ident)
            s, e = stream_of[i], executor_of[i]
            handled = 0.0
            if kernel[i] or overhead > 0:
                if not woken and (bl_head[e] >= 0 or executor_free[e] > ready):  # busy: wait in line
                    bl_next[i] = -1
                    if bl_tail[e] >= 0:
                        bl_next[bl_tail[e]] = i
                    else:
                        bl_head[e] = i
                    bl_tail[e] = i
                    if not waking[e]:
                        waking[e] = True
                        hsize = push(heap, hsize, executor_free[e], -1 - e)
                    continue
                if pool[0, 0] > ready:  # every pool thread is busy: back when one is free
                    if woken:  # the executor keeps its place: its oldest op stays first in line
                        bl_next[i] = bl_head[e]
                        bl_head[e] = i
                        if bl_tail[e] < 0:
                            bl_tail[e] = i
                        waking[e] = True
                    if wait_q.shape[0] <= n + executors:
                        wait_q = np.zeros((n + executors + 1, 2))
                        wait_state, wait_skip = np.zeros(n, np.int32), np.zeros(n, np.int32)
                        wait_next = np.full(n, -1, np.int32)
                    elif qsize == wait_q.shape[0]:  # stale entries fill it: room for every live one
                        qsize = compact(wait_q, qsize, wait_skip)
                    qsize = push(wait_q, qsize, 0.0, -1 - e if woken else i)
                    if not woken:
                        wait_state[i] = 1
                        wait_next[i] = wait_first[e]
                        wait_first[e] = i
                    continue
                # The executor takes a thread: its ops waiting for one go back to the heap, due now.
                k = wait_first[e]
                while k >= 0:
                    if wait_state[k] == 1 and k != i:
                        wait_state[k] = 0
                        wait_skip[k] += 1
                        hsize = push(heap, hsize, ready, k)
                    k = wait_next[k]
                wait_first[e] = -1
                handled = ready + overhead
            if kernel[i]:
                host_free = handled + own
                if serial > 0:
                    host_free = (host_free if host_free > driver else driver) + serial
                    driver = host_free
                executor_free[e] = host_free
                replace_least(pool, 0, host_free)
                if bl_head[e] >= 0 and not waking[e]:
                    waking[e] = True
                    hsize = push(heap, hsize, host_free, -1 - e)
                start[i] = host_free  # launched
                if q_tail[s] >= 0:
                    q_next[q_tail[s]] = i
                else:
                    q_head[s] = i
                q_tail[s] = i
                waiting[s] = True
                known = host_free
            else:
                if overhead > 0:
                    executor_free[e] = handled
                    replace_least(pool, 0, handled)
                    ready = handled
                    if bl_head[e] >= 0 and not waking[e]:
                        waking[e] = True
                        hsize = push(heap, hsize, handled, -1 - e)
                start[i] = ready
                done += 1
                r = i // period  # the request's last task issues the next request (a closed loop)
                finished[r] = max(finished[r], ready)
                remaining[r] -= 1
                if remaining[r] == 0 and counters[NEXT_REQUEST] < copies:
                    hsize = _issue(
                        finished[r], req, executor_free, counters, issued, host_ready, host_pending, heap, hsize
                    )
                if ready > end[i]:
                    end[i] = ready
                device_pending[i] -= 1
                if device_pending[i] == 0:
                    work_i[top], work_f[top] = i, end[i]
                    top += 1
                known = ready
            # i's outputs are known to the host (launched, or passed through): its local consumers learn it.
            local = neutral[i]
            for k in range(ptr[i], ptr[i + 1]):
                j = dst[k]
                if local or stream_of[j] == s:
                    if known > host_ready[j]:
                        host_ready[j] = known
                    host_pending[j] -= 1
                    if host_pending[j] == 0:
                        hsize = push(heap, hsize, host_ready[j], j)
        if every_task_done:
            break
        # Idle streams start their next launched kernel (at its launch time or now).
        for s in range(streams):
            if waiting[s]:
                waiting[s] = False
                if not stream_busy[s] and q_head[s] >= 0:
                    i = q_head[s]
                    q_head[s] = q_next[i]
                    if q_head[s] < 0:
                        q_tail[s] = -1
                    stream_busy[s] = True
                    ssize = push(starts, ssize, max(start[i], now, stream_block[s]), i)  # launched, or later
        # Advance to the next event: a kernel ends, a kernel starts, or the host finds an op ready.
        rate = 1.0 / demand if demand > 1.0 else 1.0
        t_end = now + (running[0, 0] - vclock) / rate if rsize > 0 else inf
        t_start = starts[0, 0] if ssize > 0 else inf
        t_host = heap[0, 0] if hsize > 0 else inf
        while qsize > 0 and wait_q[0, 1] >= 0 and wait_skip[int(wait_q[0, 1])] > 0:  # moved back to the heap
            wait_skip[int(wait_q[0, 1])] -= 1
            qsize = pop(wait_q, qsize)
        if qsize > 0 and pool[0, 0] < t_host:
            t_host = pool[0, 0]
        t_next = min(t_end, t_start, t_host)
        if t_next == inf:
            stalled = done < n
            break
        if t_next > now:
            vclock += (t_next - now) * rate
            now = t_next
        if rsize > 0 and t_end <= t_start and t_end <= t_host:
            i = int(running[0, 1])
            rsize = pop(running, rsize)
            demand = demand - share[i] if rsize > 0 else 0.0
            s = stream_of[i]
            stream_busy[s] = False
            busy_total[s] += now - start[i]
            end[i] = now
            done += 1
            waiting[s] = True
            work_i[top], work_f[top] = i, now  # passed on at the top of the loop (nothing else reads it before)
            top += 1
            r = i // period
            finished[r] = max(finished[r], now)
            remaining[r] -= 1
            if remaining[r] == 0 and counters[NEXT_REQUEST] < copies:
                hsize = _issue(finished[r], req, executor_free, counters, issued, host_ready, host_pending, heap, hsize)
        elif ssize > 0 and t_start <= t_host:
            i = int(starts[0, 1])
            ssize = pop(starts, ssize)
            start[i] = now
            demand += share[i]
            rsize = push(running, rsize, vclock + duration[i], i)
    return start, end, busy_total, counters, waits_i, waits_f, issued, finished, stalled
