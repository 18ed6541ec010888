"""A cost model's tasks as flat arrays: what the simulator's event loop and the list schedules read."""

from typing import NamedTuple

import numpy as np


class TaskArrays(NamedTuple):
    """A cost model's tasks as the compiled event loop reads them (msopt.simulator.event_loop)."""

    ptr: np.ndarray  # successors of task i: edges ptr[i]:ptr[i + 1], in the cost model's successors() order
    dst: np.ndarray  # per edge: the consumer
    port: np.ndarray  # per edge: the output index, -1 for a control edge
    nbytes: np.ndarray  # per edge: the bytes of that output (0 for a control edge)
    duration: np.ndarray  # per task: standalone microseconds
    share: np.ndarray  # per task: GPU share
    kernel: np.ndarray  # per task: launches a kernel
    neutral: np.ndarray  # per task: read in place by every stream (a constant, an input)
    sources: np.ndarray  # tasks without inputs, ascending


def task_arrays(cm):
    """``cm``'s TaskArrays, built once per cost model (shared with its with_target copies)."""
    cache = cm.__dict__.setdefault("_arrays", {})
    if "tasks" not in cache:
        cache["tasks"] = _build_arrays(cm)
    return cache["tasks"]


def _build_arrays(cm):
    t, n = cm.tasks, len(cm)
    data_ptr, _, _, control_ptr, _ = t.csr()
    data_count, control_count = np.diff(data_ptr), np.diff(control_ptr)
    ptr, dst, port = cm.successor_arrays()  # per producer, by consumer, its data inputs before its control ones
    src = np.repeat(np.arange(n), np.diff(ptr))
    out_start, out_values = cm.output_arrays()
    out_count = np.diff(out_start)
    known = (port >= 0) & (port < out_count[src])
    nbytes = np.zeros(len(dst), np.int64)
    nbytes[known] = out_values[out_start[src[known]] + port[known]]
    duration, share, kernel, neutral = task_figures(cm)
    return TaskArrays(
        ptr=ptr,
        dst=dst,
        port=port,
        nbytes=nbytes,
        duration=duration,
        share=share,
        kernel=kernel,
        neutral=neutral,
        sources=np.flatnonzero((data_count + control_count) == 0).astype(np.int64),
    )


def task_figures(cm):
    """(duration, share, kernel, neutral) of ``cm``'s tasks as float64 and bool arrays, made once per cost model
    (shared with its with_target copies, whose tasks and times are the same): the simulator and the list
    schedules read them."""
    cache = cm.__dict__.setdefault("_arrays", {})
    if "figures" not in cache:
        n = len(cm.tasks.key)
        cache["figures"] = (
            np.asarray(cm.duration, np.float64).reshape(n),
            np.asarray(cm.share, np.float64).reshape(n),
            np.asarray(cm.kernel, np.bool_).reshape(n),
            np.asarray(cm.neutral, np.bool_).reshape(n),
        )
    return cache["figures"]
