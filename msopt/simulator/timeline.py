"""A simulated run as Chrome trace-event JSON (chrome://tracing, Perfetto): one track per stream, waits as flows.

Tracks: one per stream with a slice per kernel, and one for the cross-stream syncs and
device-to-device copies (async slices: copies overlap). Each cross-stream wait between kernels is
a flow arrow from the producing kernel to the consuming kernel (through pass-through ops).
Times are microseconds, as the trace-event format wants.
"""

PID = 1


def chrome_trace(result, name=None):
    """The trace-event document of a msopt.simulator.simulate Result."""
    cm = result.cost_model
    keys, ops = cm.tasks.key, cm.tasks.op
    streams = result.streams
    copy_track = streams
    title = name or f"msopt simulation ({cm.target.description}, batch {cm.batch_size})"
    events = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": title}}]
    for s in range(streams):
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": s, "args": {"name": f"stream {s}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": s, "args": {"sort_index": s}})
    events.append(
        {"name": "thread_name", "ph": "M", "pid": PID, "tid": copy_track, "args": {"name": "copies and syncs"}}
    )
    events.append(
        {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": copy_track, "args": {"sort_index": streams}}
    )
    for i in range(len(keys)):
        if not cm.kernel[i]:
            continue
        events.append(
            {
                "name": keys[i].rpartition(":")[2] or keys[i],
                "cat": ops[i],
                "ph": "X",
                "pid": PID,
                "tid": result.stream_of[i],
                "ts": result.start[i],
                "dur": max(result.end[i] - result.start[i], 0.0),
                "args": {
                    "node": keys[i],
                    "op": ops[i],
                    "standalone_us": round(cm.duration[i], 3),
                    "gpu_share": round(cm.share[i], 4),
                },
            }
        )
    succ = cm.successors()
    for k, wait in enumerate(result.waits):
        src, dst = wait["src"], wait["dst"]
        # The copy (or bare sync) as an async slice: copies overlap in time, which thread slices may not.
        copy = {
            "name": f"{'copy' if wait['bytes'] else 'sync'} to stream {wait['dst_stream']}",
            "cat": "wait",
            "id": k,
            "pid": PID,
            "tid": copy_track,
        }
        events.append(
            {
                **copy,
                "ph": "b",
                "ts": wait["at_us"],
                "args": {"from": keys[src], "to": keys[dst], "bytes": wait["bytes"]},
            }
        )
        events.append({**copy, "ph": "e", "ts": max(wait["ready_us"], wait["at_us"])})
        consumer = _first_kernel(cm, succ, result.stream_of, dst)
        if cm.kernel[src] and consumer is not None:
            src_end = result.end[src]
            src_ts = max(result.start[src], src_end - min(0.001, (src_end - result.start[src]) / 2))
            events.append(
                {"name": "wait", "cat": "wait", "ph": "s", "id": k, "pid": PID, "tid": wait["src_stream"], "ts": src_ts}
            )
            events.append(
                {
                    "name": "wait",
                    "cat": "wait",
                    "ph": "f",
                    "bp": "e",
                    "id": k,
                    "pid": PID,
                    "tid": wait["dst_stream"],
                    "ts": result.start[consumer],
                }
            )
    report = result.report()
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {key: value for key, value in report.items() if not isinstance(value, list)},
    }


def _first_kernel(cm, succ, stream_of, task, hops=8):
    """``task`` if it launches a kernel, else the first kernel it feeds on its own stream (a few hops), else None."""
    stream = stream_of[task]
    frontier = [task]
    for _ in range(hops):
        nxt = []
        for i in frontier:
            if cm.kernel[i]:
                return i
            nxt.extend(j for j, _ in succ[i] if stream_of[j] == stream)
        frontier = nxt[:64]
        if not frontier:
            return None
    return None
