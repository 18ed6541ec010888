"""Discrete-event simulation of one model run on N GPU streams: makespan, syncs, copies, and a bound.

Public API (stable; the rules, the partition report and the visualizer call it):

    from msopt.simulator.cost import CostModel
    from msopt.simulator.simulate import simulate
    cost_model = CostModel(view, model, target="v100", batch_size=1, costs=None)  # once per model
    result = simulate(view, partition, streams, cost_model)                       # many times, cheap
    result.report()      # {"makespan_ms", "single_stream_ms", "speedup", "lower_bound_ms", "ratio_to_bound",
                         #  "critical_path_ms", "total_work_ms", "host_launch_ms", "syncs", "copies",
                         #  "copy_bytes", "stream_busy_ms": [...], "streams", "target", "batch_size", ...}
    result.makespan_us   # the same figures as attributes, in microseconds
    result.events()      # [{"key", "op", "stream", "start_us", "end_us"}] for every op that launches a kernel
    result.waits         # [{"src", "dst", "src_stream", "dst_stream", "at_us", "ready_us", "bytes"}] per cross-stream
                         #  wait; src and dst are task ids (cost_model.tasks.key[i] is the node key)
    result.start, result.end, result.stream_of   # per task id, microseconds and stream (lists, built on first use)

The event loop itself is compiled (msopt.simulator.event_loop, numba through msopt.compiled.jit; imported on the first
simulation, never by ``import msopt``): ``task_arrays(cost_model)`` flattens the tasks once per cost
model, ``run_tasks`` runs them; every simulation (single runs, host corners, requests in flight) goes
through it.

The partition maps node keys to streams. An op inside a function body that the partition does not
name runs where its caller runs (TensorFlow places a called function's unplaced ops on the call's
device); anything else absent runs on stream 0.

The model of the machine (constants and sources in msopt.simulator.host_model and docs/reference.md):
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

from itertools import repeat
from typing import NamedTuple

import numpy as np

from msopt.compiled.side_by_side import ahead
from msopt.simulator.bound import lower_bound  # noqa: F401  (re-exported: the cost model caches it)
from msopt.simulator.host_model import host_settings
from msopt.simulator.task_arrays import TaskArrays, task_arrays  # noqa: F401  (re-exported: the simulator reads them)


class Result:
    """The figures and the schedule of one simulated run."""

    def __init__(self, cost_model, streams, stream_of, start, end, waits, syncs, copies, copy_bytes, busy):
        self.cost_model = cost_model
        self.streams = streams
        self.stream_of = stream_of  # per task
        self._start, self._end = start, end  # numpy arrays: lists on first use (most callers need the makespan only)
        self._times = {}
        self._wait_rows = waits  # (int columns, float columns) of the waits
        self.syncs = syncs
        self.copies = copies
        self.copy_bytes = copy_bytes
        self.busy_us = busy  # per stream: time some kernel of the stream ran
        self.makespan_us = float(end.max()) if len(end) else 0.0

    @property
    def start(self):
        """Per task, when it started (microseconds)."""
        if "start" not in self._times:
            self._times["start"] = self._start.tolist()
        return self._times["start"]

    @property
    def end(self):
        """Per task, when it ended (microseconds)."""
        if "end" not in self._times:
            self._times["end"] = self._end.tolist()
        return self._times["end"]

    @property
    def _waits(self):
        """Tuples (src, dst, src stream, dst stream, at, ready, bytes): small for big graphs."""
        ints, floats = self._wait_rows
        src, dst, src_stream, dst_stream, nbytes = ints.T.tolist() if len(ints) else ([],) * 5
        at, ready = floats.T.tolist() if len(floats) else ([],) * 2
        return list(zip(src, dst, src_stream, dst_stream, at, ready, nbytes))

    @property
    def single_stream_us(self):
        return self.cost_model.single_stream_us()

    @property
    def lower_bound_us(self):
        return self.bound()["lower_bound_us"]

    def bound(self):
        """The cost model's bound, tightened for this stream count by msopt.simulator.bound (serial streams, cuts)."""
        from msopt.simulator.bound import tightened

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
    return list(_task_streams(cost_model.tasks, partition))


def stream_array(cost_model, partition, streams):
    """``check_streams`` of ``streams_of``, read into an int64 array without the list: for the auto search's plans,
    whose streams are ints (a value that is not, or is outside [0, streams), takes check_streams' way and its
    error)."""
    t = cost_model.tasks
    try:
        found = np.fromiter(_task_streams(t, partition), np.int64, len(t.key))
    except (TypeError, ValueError, OverflowError):
        found = None
    if found is None or (len(found) and (found.min() < 0 or found.max() >= streams)):
        return check_streams(t.key, streams_of(cost_model, partition), streams)
    return found


def _task_streams(t, partition):
    if len(t.instances) == 1:
        return map(partition.get, t.key, repeat(0, len(t.key)))
    absent = object()
    inst_stream = inherited_streams(t.instances, [partition.get(call, absent) for call, _ in t.instances[1:]], absent)
    return map(partition.get, t.key, map(inst_stream.__getitem__, t.instance))


def inherited_streams(instances, call_streams, absent):
    """Per call instance (0, the main graph: stream 0), the stream its tasks without one of their own run on: its
    call's (``call_streams[k - 1]``), or, where that equals ``absent``, its parent instance's (parents precede children)."""
    inherited = [0] * len(instances)
    for k, stream in enumerate(call_streams, 1):
        inherited[k] = inherited[instances[k][1]] if stream == absent else stream
    return inherited


def simulate(view, partition, streams, cost_model, others=()):
    """Simulate one run of ``cost_model``'s tasks with ``partition`` over ``streams`` streams -> Result.
    ``others`` (cost models of the same tasks under other host constants) are run with the same streams
    too: then a list of Results (no waits recorded), ``cost_model``'s first."""
    return simulate_streams(cost_model, streams_of(cost_model, partition), streams, others)


def simulate_streams(cost_model, stream_of, streams, others=(), waits=True):
    """``simulate`` with each task's stream given: ``stream_of``, a list or an integer array over the tasks (as
    ``streams_of`` gives them). Without ``waits`` the Result records no waits (what the auto search judges by needs
    none)."""
    if not others:
        return _run(cost_model, streams, stream_of, waits, check_streams(cost_model.tasks.key, stream_of, streams))
    return list(run_each((cost_model, *others), stream_of, streams))


def run_each(cost_models, stream_of, streams):
    """The Result (no waits recorded) of each cost model of the same tasks in turn, each simulated when asked for or
    just before (a caller may stop early), with ``stream_of`` as in ``simulate_streams``."""
    cost_models = list(cost_models)
    if not cost_models:
        return iter(())
    array = check_streams(cost_models[0].tasks.key, stream_of, streams)
    return ahead(lambda cm: _run(cm, streams, stream_of, False, array), cost_models, len(array))  # side_by_side


def check_streams(keys, stream_of, streams):
    """``stream_of`` as an int64 array if every task's stream is an int in [0, streams), else ValueError naming the
    first node outside."""
    found = np.asarray(stream_of) if len(stream_of) else np.zeros(0, np.int64)
    if found.dtype.kind in "iu" and (not len(found) or (found.min() >= 0 and found.max() < streams)):
        return found.astype(np.int64, copy=False)
    for key, s in zip(keys, stream_of):
        if not isinstance(s, int) or not 0 <= s < streams:
            raise ValueError(f"node '{key}' is on stream {s}, outside [0, {streams})")
    return np.asarray(stream_of, np.int64)  # booleans


class Loop(NamedTuple):
    """Requests in flight (msopt.simulator.concurrency): R copies of the tasks, each request's own executors, sources gated
    until the closed loop issues their request. A single run is one request of one copy."""

    tasks: int  # tasks per request
    executors_per_request: int
    executor_of: np.ndarray  # per task of the R copies
    executors: int
    active: int  # executors that may run at once (the inter-op pool is at most this big)
    concurrency: int  # requests issued at the start; each completion issues the next
    rank_streams: np.ndarray  # a request's streams, in the order its executors start
    rank_offsets: np.ndarray  # ... and when, after the request is issued


def run_tasks(arrays, target, streams, stream_of, record_waits=False, loop=None):
    """One run of ``arrays`` (TaskArrays) on ``target`` with each task on ``stream_of``'s stream (an int array)
    through the compiled event loop -> (start, end, busy, syncs, copies, copy_bytes, (wait ints, wait floats),
    issued, finished). ``loop`` (Loop) runs several requests; without it, one run."""
    from msopt.simulator.event_loop import COPIES, COPY_BYTES, SYNCS, WAITS, run

    if loop is None:
        used = np.flatnonzero(np.bincount(stream_of, minlength=streams))  # ascending
        offsets = np.arange(len(used)) * target.partition_overhead_us  # the run starts them one after another
        loop = Loop(len(stream_of), streams, stream_of, streams, streams, 1, used, offsets)
    graph = (arrays.ptr, arrays.dst, arrays.port, arrays.nbytes, stream_of, arrays.kernel, arrays.neutral)
    request = (loop.tasks, loop.executors_per_request, arrays.sources, loop.rank_streams, loop.rank_offsets)
    host = (target.launch_us, target.sync_us, target.op_overhead_us, target.launch_contention)
    host = np.array([*host, target.copy_latency_us, target.copy_gbs * 1e3], np.float64)  # copy: bytes per us
    ints = np.array([target.launch_threads, target.copy_streams, bool(target.merge_copy_streams)], np.int64)
    start, end, busy, counters, waits_i, waits_f, issued, finished, stalled = run(
        graph, arrays.duration, arrays.share, loop.executor_of, loop.executors, loop.active, streams, request,
        loop.concurrency, host, ints, record_waits,
    )  # fmt: skip
    if stalled:
        raise RuntimeError("simulation stalled: a dependency is never satisfied")
    recorded = int(counters[WAITS])
    figures = (int(counters[SYNCS]), int(counters[COPIES]), int(counters[COPY_BYTES]))
    return (start, end, busy.tolist(), *figures, (waits_i[:recorded], waits_f[:recorded]), issued, finished)


def _run(cm, streams, stream_of, record_waits, stream_array=None):
    """One run of ``cm``'s tasks, each on its ``stream_of`` stream (``stream_array``: the same as int64) -> Result."""
    if stream_array is None:
        stream_array = np.asarray(stream_of, np.int64).reshape(len(cm))
    start, end, busy, syncs, copies, nbytes, waits, _, _ = run_tasks(
        task_arrays(cm), cm.target, streams, stream_array, record_waits
    )
    return Result(cm, streams, stream_of, start, end, waits, syncs, copies, nbytes, busy)


def single_stream(cost_model):
    """The run with every op on stream 0."""
    return _run(cost_model, 1, [0] * len(cost_model), record_waits=False)


__all__ = [
    "simulate",
    "simulate_streams",
    "run_each",
    "stream_array",
    "inherited_streams",
    "single_stream",
    "lower_bound",
    "streams_of",
    "task_arrays",
    "run_tasks",
    "Result",
]
