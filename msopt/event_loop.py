"""The simulator's event loop, compiled: flat arrays in (msopt.simulate prepares them), start/end times and figures out."""

import numpy as np

from msopt.jit import compiled

# Slots of the int64 counters array.
SYNCS, COPIES, COPY_BYTES, WAITS, NEXT_REQUEST = range(5)


@compiled
def _push(keys, ids, size, key, ident):
    """Push (key, ident) on the binary heap keys[:size], ids[:size] ordered by (key, ident); the new size."""
    k = size
    while k > 0:
        parent = (k - 1) >> 1
        pk, pi = keys[parent], ids[parent]
        if key < pk or (key == pk and ident < pi):
            keys[k], ids[k] = pk, pi
            k = parent
        else:
            break
    keys[k], ids[k] = key, ident
    return size + 1


@compiled
def _pop(keys, ids, size):
    """Remove the heap's least (key, ident), which the caller read at [0]; the new size."""
    size -= 1
    key, ident = keys[size], ids[size]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (keys[right] < keys[child] or (keys[right] == keys[child] and ids[right] < ids[child])):
            child = right
        ck, ci = keys[child], ids[child]
        if ck < key or (ck == key and ci < ident):
            keys[k], ids[k] = ck, ci
            k = child
        else:
            break
    if size > 0:
        keys[k], ids[k] = key, ident
    return size


@compiled
def _replace_least(values, value):
    """heapq.heapreplace on a heap of floats: the least value gives way to ``value``."""
    size = values.shape[0]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        if child + 1 < size and values[child + 1] < values[child]:
            child += 1
        if values[child] < value:
            values[k] = values[child]
            k = child
        else:
            break
    values[k] = value


@compiled
def _satisfy(j, at, host_ready, host_pending, hkeys, hids, hsize):
    """One of j's inputs is known ready on j's executor at ``at``; j enters the host heap with its last one."""
    if at > host_ready[j]:
        host_ready[j] = at
    host_pending[j] -= 1
    if host_pending[j] == 0:
        hsize = _push(hkeys, hids, hsize, host_ready[j], j)
    return hsize


@compiled
def _on_host(i, at, ptr, dst, stream_of, neutral, host_ready, host_pending, hkeys, hids, hsize):
    """i's outputs are known to the host at ``at`` (launched, or passed through): its local consumers learn it."""
    s = stream_of[i]
    local = neutral[i]
    for k in range(ptr[i], ptr[i + 1]):
        j = dst[k]
        if local or stream_of[j] == s:
            hsize = _satisfy(j, at, host_ready, host_pending, hkeys, hids, hsize)
    return hsize


@compiled
def _copy_done(s, at, took, merge, stream_block, copy_lanes):
    """When a copy of ``took`` microseconds, issued by stream ``s`` at ``at``, is done."""
    if merge:  # on the compute stream: the stream's next kernel waits for it
        begin = at if at > stream_block[s] else stream_block[s]
        stream_block[s] = begin + took
        return begin + took
    if copy_lanes.shape[1] == 0:
        return at + took
    lanes = copy_lanes[s]
    begin = at if at > lanes[0] else lanes[0]
    _replace_least(lanes, begin + took)
    return begin + took


@compiled
def _on_device(first, first_at, g, state, hkeys, hids, hsize, host, merge, counters, waits_i, waits_f):
    """first's outputs exist on the device at ``first_at``; pass-through ops (no kernel) chain on (a worklist)."""
    ptr, dst, port_of, nbytes_of, stream_of, kernel, neutral = g
    (
        host_ready,
        host_pending,
        device_ready,
        device_pending,
        end,
        stream_block,
        copy_lanes,
        stamp,
        arrival,
        work_i,
        work_f,
    ) = state
    sync, copy_fixed, copy_rate = host[1], host[4], host[5]
    streams = stream_block.shape[0]
    top = 0
    work_i[0], work_f[0] = first, first_at
    top = 1
    while top > 0:
        top -= 1
        i, at = work_i[top], work_f[top]
        s = stream_of[i]
        local = neutral[i]
        for k in range(ptr[i], ptr[i + 1]):
            j, port = dst[k], port_of[k]
            sj = stream_of[j]
            if not (local or sj == s):
                slot = (port + 1) * streams + sj  # one transfer per (tensor, destination stream)
                if stamp[slot] == i:
                    ready = arrival[slot]
                else:
                    nbytes = nbytes_of[k]
                    ready = at + sync
                    if port >= 0:
                        ready = sync + _copy_done(
                            s, at, copy_fixed + nbytes / copy_rate, merge, stream_block, copy_lanes
                        )
                    stamp[slot], arrival[slot] = i, ready
                    counters[SYNCS] += 1
                    if port >= 0:
                        counters[COPIES] += 1
                        counters[COPY_BYTES] += nbytes
                    w = counters[WAITS]
                    if w < waits_i.shape[0]:  # recorded when asked (room for one per edge)
                        waits_i[w, 0], waits_i[w, 1], waits_i[w, 2], waits_i[w, 3] = i, j, s, sj
                        waits_i[w, 4] = nbytes if port >= 0 else 0
                        waits_f[w, 0], waits_f[w, 1] = at, ready
                        counters[WAITS] = w + 1
                hsize = _satisfy(j, ready, host_ready, host_pending, hkeys, hids, hsize)
            if not kernel[j]:
                if at > device_ready[j]:
                    device_ready[j] = at
                device_pending[j] -= 1
                if device_pending[j] == 0:
                    end[j] = device_ready[j]
                    work_i[top], work_f[top] = j, device_ready[j]
                    top += 1
    return hsize


@compiled
def _issue(at, req, executor_free, counters, issued, host_ready, host_pending, hkeys, hids, hsize):
    """The next request starts at ``at``: its executors one after another, then its sources."""
    period, stride, sources, rank_streams, rank_offsets = req
    r = counters[NEXT_REQUEST]
    counters[NEXT_REQUEST] = r + 1
    issued[r] = at
    for k in range(rank_streams.shape[0]):
        executor_free[r * stride + rank_streams[k]] = at + rank_offsets[k]
    for k in range(sources.shape[0]):
        hsize = _satisfy(r * period + sources[k], at, host_ready, host_pending, hkeys, hids, hsize)
    return hsize


@compiled
def _request_done(i, at, req, remaining, finished, executor_free, counters, issued, state, hkeys, hids, hsize):
    """Task i is done at ``at``; the last task of a request issues the next one (a closed loop)."""
    period = req[0]
    r = i // period
    if at > finished[r]:
        finished[r] = at
    remaining[r] -= 1
    if remaining[r] == 0 and counters[NEXT_REQUEST] < finished.shape[0]:
        hsize = _issue(finished[r], req, executor_free, counters, issued, state[0], state[1], hkeys, hids, hsize)
    return hsize


@compiled
def run(g, duration, share, executor_of, executors, active, streams, req, concurrency, host, ints, record_waits):
    """The event loop of msopt.simulate (its docstring describes the machine); arguments as msopt.simulate builds them.

    g: (CSR successor pointers, consumers, ports (-1 control), bytes per edge, stream per task, kernel, neutral);
    req: (tasks per request, executors per request, source tasks of a request, its streams, their start offsets),
    copies = len(tasks) // tasks per request; host: (launch, sync, op overhead, contention, copy latency,
    copy rate in bytes per microsecond); ints: (launch threads, copy streams, merge copy streams).
    Returns (start, end, busy per stream, counters, waits ints, waits floats, issued, finished, stalled)."""
    ptr, dst, port_of, nbytes_of, stream_of, kernel, neutral = g
    period, sources = req[0], req[2]
    launch, overhead, contention = host[0], host[2], host[3]
    launch_threads, copy_streams, merge = ints[0], ints[1], ints[2] != 0
    n = stream_of.shape[0]
    copies = n // period if period > 0 else 0
    serial = contention * launch  # held on the driver's context-wide resource
    own = launch - serial  # on the launching thread alone
    inf = np.inf

    host_pending = np.zeros(n, np.int64)  # inputs (edges in) not yet known ready on the host
    device_pending = np.empty(n, np.int64)
    for k in range(dst.shape[0]):
        host_pending[dst[k]] += 1
    for i in range(n):
        device_pending[i] = host_pending[i] + 1 if not kernel[i] else 0  # no-kernel ops: inputs on the device
    for r in range(copies):
        for k in range(sources.shape[0]):
            host_pending[r * period + sources[k]] += 1  # gated until the request is issued
    host_ready = np.zeros(n)
    device_ready = np.zeros(n)  # for a no-kernel op: when its inputs (hence its outputs) exist on the device
    start = np.zeros(n)
    end = np.zeros(n)
    max_port = -1
    for k in range(port_of.shape[0]):
        if port_of[k] > max_port:
            max_port = port_of[k]
    stamp = np.full((max_port + 2) * streams, -1, np.int64)  # transfers of the task being done: (port, stream)
    arrival = np.zeros((max_port + 2) * streams)
    work_i = np.empty(n + 1, np.int64)
    work_f = np.empty(n + 1)
    edges = dst.shape[0] if record_waits else 0
    waits_i = np.empty((edges, 5), np.int64)
    waits_f = np.empty((edges, 2))
    counters = np.zeros(5, np.int64)

    hkeys = np.empty(n + executors + 1)  # the host heap: (time, task), or (time, -1 - executor) to wake one
    hids = np.empty(n + executors + 1, np.int64)
    hsize = 0
    pool = np.zeros(max(1, min(launch_threads, active)))  # when each inter-op thread is next free (a heap)
    executor_free = np.zeros(executors)  # each executor handles one op at a time
    bl_head = np.full(executors, -1, np.int64)  # ops ready while their executor was busy, in ready order
    bl_tail = np.full(executors, -1, np.int64)
    bl_next = np.full(n, -1, np.int64)
    waking = np.zeros(executors, np.bool_)  # a wake-up of the executor is in the host heap
    driver = 0.0  # when the driver's context-wide launch resource is next free
    copy_lanes = np.zeros((streams, copy_streams if copy_streams > 0 else 0))
    stream_block = np.zeros(streams)  # merged copies: the compute stream is busy copying until then
    q_head = np.full(streams, -1, np.int64)  # per stream: launched kernels in launch order
    q_tail = np.full(streams, -1, np.int64)
    q_next = np.full(n, -1, np.int64)
    launched_at = np.zeros(n)
    stream_busy = np.zeros(streams, np.bool_)
    busy_total = np.zeros(streams)
    waiting = np.zeros(streams, np.bool_)  # streams that got a launch or finished a kernel (may start the next)
    skeys = np.empty(streams + 1)  # kernels whose start time is known: (time, task)
    sids = np.empty(streams + 1, np.int64)
    ssize = 0
    rkeys = np.empty(streams + 1)  # running kernels: (virtual finish, task)
    rids = np.empty(streams + 1, np.int64)
    rsize = 0
    demand = 0.0
    vclock = 0.0
    now = 0.0
    done = 0
    remaining = np.full(copies, period, np.int64)
    issued = np.zeros(copies)
    finished = np.zeros(copies)
    state = (
        host_ready,
        host_pending,
        device_ready,
        device_pending,
        end,
        stream_block,
        copy_lanes,
        stamp,
        arrival,
        work_i,
        work_f,
    )
    for _ in range(min(concurrency, copies)):  # the first requests start together
        hsize = _issue(0.0, req, executor_free, counters, issued, host_ready, host_pending, hkeys, hids, hsize)

    while done < n:
        # Each executor handles, one at a time, every op whose inputs it knows ready (it never waits for
        # the GPU), on a thread of the inter-op pool.
        while hsize > 0 and hkeys[0] <= now:
            ready, i = hkeys[0], hids[0]
            hsize = _pop(hkeys, hids, hsize)
            woken = i < 0
            if woken:  # an executor is free: it takes the oldest op waiting for it
                e = -1 - i
                i = bl_head[e]
                bl_head[e] = bl_next[i]
                if bl_head[e] < 0:
                    bl_tail[e] = -1
                waking[e] = False
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
                        hsize = _push(hkeys, hids, hsize, executor_free[e], -1 - e)
                    continue
                if pool[0] > ready:  # every pool thread is busy: back when one is free
                    if woken:  # the executor keeps its place: its oldest op stays first in line
                        bl_next[i] = bl_head[e]
                        bl_head[e] = i
                        if bl_tail[e] < 0:
                            bl_tail[e] = i
                        waking[e] = True
                        hsize = _push(hkeys, hids, hsize, pool[0], -1 - e)
                    else:
                        hsize = _push(hkeys, hids, hsize, pool[0], i)
                    continue
                handled = ready + overhead
            if kernel[i]:
                host_free = handled + own
                if serial > 0:
                    host_free = (host_free if host_free > driver else driver) + serial
                    driver = host_free
                executor_free[e] = host_free
                _replace_least(pool, host_free)
                if bl_head[e] >= 0 and not waking[e]:
                    waking[e] = True
                    hsize = _push(hkeys, hids, hsize, host_free, -1 - e)
                launched_at[i] = host_free
                if q_tail[s] >= 0:
                    q_next[q_tail[s]] = i
                else:
                    q_head[s] = i
                q_tail[s] = i
                waiting[s] = True
                hsize = _on_host(
                    i, host_free, ptr, dst, stream_of, neutral, host_ready, host_pending, hkeys, hids, hsize
                )
            else:
                if overhead > 0:
                    executor_free[e] = handled
                    _replace_least(pool, handled)
                    ready = handled
                    if bl_head[e] >= 0 and not waking[e]:
                        waking[e] = True
                        hsize = _push(hkeys, hids, hsize, handled, -1 - e)
                start[i] = ready
                done += 1
                hsize = _request_done(
                    i, ready, req, remaining, finished, executor_free, counters, issued, state, hkeys, hids, hsize
                )
                hsize = _on_host(i, ready, ptr, dst, stream_of, neutral, host_ready, host_pending, hkeys, hids, hsize)
                if ready > device_ready[i]:
                    device_ready[i] = ready
                device_pending[i] -= 1
                if device_pending[i] == 0:
                    end[i] = device_ready[i]
                    hsize = _on_device(
                        i, device_ready[i], g, state, hkeys, hids, hsize, host, merge, counters, waits_i, waits_f
                    )
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
                    at = launched_at[i]
                    if now > at:
                        at = now
                    if stream_block[s] > at:
                        at = stream_block[s]
                    ssize = _push(skeys, sids, ssize, at, i)
        # Advance to the next event: a kernel ends, a kernel starts, or the host finds an op ready.
        rate = 1.0 / demand if demand > 1.0 else 1.0
        t_end = now + (rkeys[0] - vclock) / rate if rsize > 0 else inf
        t_start = skeys[0] if ssize > 0 else inf
        t_host = hkeys[0] if hsize > 0 else inf
        t_next = min(t_end, t_start, t_host)
        if t_next == inf:
            return start, end, busy_total, counters, waits_i, waits_f, issued, finished, done < n
        if t_next > now:
            vclock += (t_next - now) * rate
            now = t_next
        if rsize > 0 and t_end <= t_start and t_end <= t_host:
            i = rids[0]
            rsize = _pop(rkeys, rids, rsize)
            demand = demand - share[i] if rsize > 0 else 0.0
            s = stream_of[i]
            stream_busy[s] = False
            busy_total[s] += now - start[i]
            end[i] = now
            done += 1
            waiting[s] = True
            hsize = _on_device(i, now, g, state, hkeys, hids, hsize, host, merge, counters, waits_i, waits_f)
            hsize = _request_done(
                i, now, req, remaining, finished, executor_free, counters, issued, state, hkeys, hids, hsize
            )
        elif ssize > 0 and t_start <= t_host:
            i = sids[0]
            ssize = _pop(skeys, sids, ssize)
            start[i] = now
            demand += share[i]
            rsize = _push(rkeys, rids, rsize, vclock + duration[i], i)
    return start, end, busy_total, counters, waits_i, waits_f, issued, finished, False
