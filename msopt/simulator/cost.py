"""The GPU cost model: each op instance of one run, its standalone time, GPU share and output bytes on a target.

``CostModel(view, model, target, batch_size, costs)`` is built once per model and target. It
takes the flattened run of one signature (msopt.graph.flat: one task per executed op instance, calls
and functional control flow opened, in a fixed topological order), the shape of every tensor
(msopt.simulator.shapes) and gives each task a standalone time and GPU share from the roofline of
msopt.simulator.kernels on a GPU of msopt.simulator.targets. The simulator (msopt.simulator.simulate) runs these tasks;
nothing here depends on a partition.

A kernel alone on the GPU uses ``share`` of it for ``standalone`` microseconds; concurrent kernels
share the GPU (see msopt.simulator.simulate). Ops that launch no kernel (Const, Identity, ReadVariableOp,
Reshape, control-flow plumbing, functional If/While whose functions' ops are the kernels, ...)
take no time. Measured times from a costs file replace the standalone time of the ops they name.
"""

import copy
from itertools import chain, repeat
from operator import itemgetter

import numpy as np

from msopt.compiled.gc_pause import gc_paused
from msopt.errors import InputError
from msopt.files.reading import MAX_COSTS_BYTES, read_json
from msopt.graph.flat import Tasks, flat_run
from msopt.graph.op_tables import BACK_EDGE_OPS, CALL_OPS, NEUTRAL_OPS, NO_KERNEL_OPS, OUTPUT_ARGS  # noqa: F401
from msopt.simulator.kernels import (  # noqa: F401  (re-exported: callers import the model's constants from here)
    COMPUTE_EFFICIENCY,
    DTYPE_BYTES,
    ELEMENTWISE_OUTPUTS_PER_THREAD,
    GATHER_OPS,
    GEMM_OPS,
    GEMM_OUTPUTS_PER_THREAD,
    MAX_BATCH_SIZE,
    MEMORY_EFFICIENCY,
    MIN_KERNEL_US,
    SHAPE_DEPENDENT_OPS,
    elements,
    flops_bytes,
    roofline,
)
from msopt.simulator.shapes import infer_shapes
from msopt.simulator.targets import DEFAULT_TARGET, TARGETS, Target  # noqa: F401

__all__ = [
    "CostModel",
    "Target",
    "TARGETS",
    "DEFAULT_TARGET",
    "Tasks",
    "gc_paused",
    "load_costs",
    "MIN_KERNEL_US",
    "NO_KERNEL_OPS",
    "NEUTRAL_OPS",
    "CALL_OPS",
    "DTYPE_BYTES",
]

# A measured time per op: 1000 s. A million such ops sum to 1e15 us, where a float still resolves 1/8 us, so the
# simulator's clock keeps advancing (at 1e308 us per op it saturated and stalled).
MAX_OP_US = 1e9


def load_costs(path):
    """Read a measured costs file: {"unit": "us"|"ms"|"s"|"ns", "ops": {node key: time}} -> {key: microseconds}.

    The file is read through msopt.files.reading (a regular file of at most MAX_COSTS_BYTES, no NaN, no huge
    integers); every time is a finite number in [0, MAX_OP_US] once in microseconds.
    """
    scale = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}
    rule = f"times are non-negative numbers of at most {MAX_OP_US:g} us ({MAX_OP_US / 1e6:g} s) per op"
    doc = read_json(path, "costs file", MAX_COSTS_BYTES, field=_costs_field, numbers=rule)
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), dict):
        raise InputError(f'{path}: a costs file is {{"unit": "us", "ops": {{"<node key>": <time>, ...}}}}')
    unit = doc.get("unit", "us")
    if not isinstance(unit, str) or unit not in scale:
        shown = {list: "a JSON array", dict: "a JSON object"}.get(type(unit), repr(unit))
        raise InputError(f"{path}: unknown unit {shown}; the unit is one of the strings: {', '.join(scale)}")
    times = {}
    for key, value in doc["ops"].items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not 0 <= value * scale[unit] <= MAX_OP_US:
            raise InputError(f"{path}: op '{key}' has time {_shown(value)} {unit}; {rule}")
        times[key] = value * scale[unit]
    return times


def _costs_field(keys):
    """How a refused number in a costs file is named: an op's time, else the keys leading to it."""
    if len(keys) == 2 and keys[0] == "ops":
        return f"op '{keys[1]}' has time"
    return None


def _shown(value):
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... (a {type(value).__name__})"


class CostModel:
    """Per-task standalone time, GPU share and output bytes of one model run on one target."""

    def __init__(self, view, model=None, target=DEFAULT_TARGET, batch_size=1, costs=None, signature=None):
        if isinstance(target, str):
            if target not in TARGETS:
                raise InputError(f"unknown target '{target}'; choose one of: {', '.join(TARGETS)}")
            target = TARGETS[target]
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise InputError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE}, got {batch_size}")
        self.view = view
        self.target = target
        self.batch_size = batch_size
        self.host_ranges = (
            None  # {constant: (lo, hi)} of the uncertain host constants (None: msopt.simulator.host_model's)
        )
        with gc_paused():
            self._build(view, model, batch_size, costs, signature)

    def _build(self, view, model, batch_size, costs, signature):
        self.signature, self.tasks, feeds = flat_run(view, model, signature)
        self.shapes = infer_shapes(view, self.tasks, feeds)  # per task: [(dtype, shape or None)] by output index
        measured = (
            load_costs(costs) if isinstance(costs, (str, bytes)) or hasattr(costs, "__fspath__") else (costs or {})
        )
        self._per_op_pass(measured)
        self._bound = None
        self._single = None
        self._succ = None
        self._succ_arrays = None
        self._preds = None
        self._arrays = {}  # the simulator's arrays (msopt.simulator.task_arrays), shared with with_target's copies

    def _per_op_pass(self, measured):
        """Every task's figures at once: element and byte counts as exact integers, the roofline as arrays."""
        t, target, batch_size, shapes = self.tasks, self.target, self.batch_size, self.shapes
        n = len(t.key)
        per_op = t.ops_in  # a per-task boolean array from a set of op types
        kernel = ~per_op(NO_KERNEL_OPS)
        self.neutral = per_op(NEUTRAL_OPS).tolist()
        # Every output of every task, flattened: element count and bytes (out_ptr[i]:out_ptr[i + 1] is task i's).
        outputs = list(chain.from_iterable(shapes))
        out_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(list(map(len, shapes)), out=out_ptr[1:])
        out_shapes = list(map(itemgetter(1), outputs))
        shape_ids = list(map(id, out_shapes))  # shapes are shared between tasks: each counted once
        counted = {k: elements(shape, batch_size) for k, shape in dict(zip(shape_ids, out_shapes)).items()}
        elems = list(map(counted.__getitem__, shape_ids))
        out_dtypes = list(map(itemgetter(0), outputs))
        sizes = list(map(DTYPE_BYTES.get, out_dtypes, repeat(4)))
        data_ptr, data_src, data_port = t.csr()[:3]
        fan_in = int(np.diff(data_ptr).max(initial=0))
        widest = int(np.diff(out_ptr).max(initial=0))
        largest = max(counted.values(), default=0) * max(sizes, default=0)
        # Sums of a task's bytes stay below 2**53 (exact in a float too): int64, else Python ints.
        exact = np.int64 if (largest + batch_size * 4) * (fan_in + 2 * widest + 2) < 2**53 else object
        elems = np.array(elems, exact).reshape(-1)
        out_bytes = elems * np.array(sizes, exact).reshape(-1)
        self._outputs = (out_ptr, out_bytes)
        out_elems = _segment_sums(elems, out_ptr)
        own_bytes = _segment_sums(out_bytes, out_ptr)
        # Each data input: the output it reads, if that task has it (a port past the outputs reads nothing).
        width = np.diff(out_ptr)[data_src]
        port = np.where(data_port < 0, data_port + width, data_port)
        if (port < 0).any():  # as a list index would: a kernel's negative port beyond the outputs is an error
            if kernel[np.repeat(np.arange(n), np.diff(data_ptr))[port < 0]].any():
                raise IndexError("list index out of range")
        valid = (data_port < width) & (port >= 0)
        read = np.where(valid, out_ptr[data_src] + port, 0)
        zero = np.zeros(1, exact)[0]
        in_elems = _segment_sums(np.where(valid, elems[read] if len(elems) else zero, zero), data_ptr)
        in_bytes = _segment_sums(np.where(valid, out_bytes[read] if len(elems) else zero, zero), data_ptr)
        # FLOPs and bytes: max(outputs, inputs) FLOPs, 5 per output for FusedBatchNorm, shape-dependent ops one by one.
        bytes_moved = in_bytes + own_bytes
        flops = np.maximum(out_elems, in_elems).astype(np.float64)
        batch_norm = per_op({op for op in t.op_codes()[0] if op.startswith("FusedBatchNorm")})
        flops[batch_norm] = 5.0 * out_elems[batch_norm].astype(np.float64)
        nodes = getattr(t, "node", None)
        for i in np.flatnonzero(per_op(SHAPE_DEPENDENT_OPS) & kernel).tolist():
            a, b = int(data_ptr[i]), int(data_ptr[i + 1])
            ins = [
                shapes[s][p] if p < len(shapes[s]) else ("float", None)
                for s, p in zip(data_src[a:b].tolist(), data_port[a:b].tolist())
            ]
            proto = nodes[i].proto if nodes else self.view.nodes[t.key[i]].proto
            flops[i], bytes_moved[i] = flops_bytes(
                t.op[i],
                proto,
                ins,
                int(in_elems[i]),
                int(in_bytes[i]),
                int(out_elems[i]),
                int(own_bytes[i]),
                batch_size,
            )
        # The roofline: the first output's dtype picks a GEMM's peak.
        half = np.zeros(n, bool)
        has_out = out_ptr[1:] > out_ptr[:-1]
        for i in np.flatnonzero(
            has_out & (np.array(sizes, np.int64).reshape(-1)[out_ptr[:-1] * has_out] == 2)
        ).tolist():
            half[i] = out_dtypes[int(out_ptr[i])] in ("half", "bfloat16")
        share, standalone = roofline(per_op(GEMM_OPS), half, flops, bytes_moved, out_elems, target)
        unknown = _segment_sums((np.array(shape_ids, np.int64).reshape(-1) == id(None)).astype(np.int64), out_ptr)
        self.unknown_shapes = int(((unknown > 0) | ~has_out)[kernel].sum())
        self.flops = _shared_floats(np.where(kernel, flops, 0.0))
        self.share = _shared_floats(np.where(kernel, share, 0.0))
        self.duration = _shared_floats(np.where(kernel, standalone, 0.0))
        self.kernel = kernel.tolist()
        self.measured = 0
        if measured:  # a measured time replaces the model's; it wins even for an op we thought free
            for i, key in enumerate(t.key):
                if key not in measured:
                    continue
                if self.kernel[i]:
                    self.duration[i] = measured[key]
                    self.measured += 1
                elif measured[key] > 0:
                    self.duration[i], self.share[i], self.kernel[i] = measured[key], 1.0 / target.sms, True
                    self.measured += 1

    @property
    def out_bytes(self):
        """Per task, the bytes of each of its outputs (a list per task, made on first use)."""
        if "_out_bytes" not in self.__dict__:
            out_ptr, out_bytes = self._outputs
            sizes, bounds = out_bytes.tolist(), out_ptr.tolist()
            self._out_bytes = [sizes[a:b] for a, b in zip(bounds, bounds[1:])]
        return self._out_bytes

    @out_bytes.setter
    def out_bytes(self, lists):  # figures given per task (a hand-built model): the arrays follow them
        self._out_bytes = lists
        self.__dict__.pop("_outputs", None)

    def output_arrays(self):
        """(ptr, bytes): task i's outputs are ptr[i]:ptr[i + 1], ``bytes`` int64 (object if they may not fit)."""
        if "_outputs" not in self.__dict__:
            lists = self._out_bytes
            ptr = np.zeros(len(lists) + 1, np.int64)
            np.cumsum(list(map(len, lists)), out=ptr[1:])
            values = np.array(list(chain.from_iterable(lists)) or [0])[: int(ptr[-1])]
            self._outputs = (ptr, values if values.dtype.kind == "i" else values.astype(object))
        return self._outputs

    # -- queries -----------------------------------------------------------------------------------
    def __len__(self):
        return len(self.tasks.key)

    def time_us(self, key):
        """Total standalone time of the op instances of node ``key`` (0 if it does not run)."""
        return sum(d for k, d in zip(self.tasks.key, self.duration) if k == key)

    def node_times(self):
        """{node key: standalone microseconds} summed over the op's instances."""
        if len(self.tasks.instances) == 1:  # one instance: every key once, read as an array by the rules
            from msopt.graph.tasks import RunCosts
            from msopt.simulator.task_arrays import task_figures

            return RunCosts(self.tasks.key, task_figures(self)[0])
        times = {}
        for k, d in zip(self.tasks.key, self.duration):
            times[k] = times.get(k, 0.0) + d
        return times

    def successors(self):
        """Per task, [(consumer task, output index or -1 for a control edge)], one entry per edge."""
        if self._succ is None:
            ptr, consumer, port = self.successor_arrays()
            pairs = list(zip(consumer.tolist(), port.tolist()))
            bounds = ptr.tolist()
            self._succ = [pairs[a:b] for a, b in zip(bounds, bounds[1:])]
        return self._succ

    def successor_arrays(self):
        """``successors()`` as int64 arrays (ptr, consumer, port): task i's entries are ptr[i]:ptr[i + 1],
        by consumer, a consumer's data inputs in order before its control edge (computed once)."""
        if self.__dict__.get("_succ_arrays") is None:
            data_ptr, data_src, data_port, control_ptr, control_src = self.tasks.csr()
            n = len(self.tasks.key)
            src = np.concatenate([data_src, control_src])
            dst = np.concatenate(
                [np.repeat(np.arange(n), np.diff(data_ptr)), np.repeat(np.arange(n), np.diff(control_ptr))]
            )
            port = np.concatenate([data_port, np.full(len(control_src), -1, np.int64)])
            by_source = np.lexsort((dst, src))  # stable: data inputs in order, then the control edge
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
            self._succ_arrays = (ptr, dst[by_source], port[by_source])
        return self._succ_arrays

    def pred_count(self):
        """Per task, how many edges (data inputs and control edges) end at it."""
        if self._preds is None:
            data_ptr, _, _, control_ptr, _ = self.tasks.csr()
            self._preds = (np.diff(data_ptr) + np.diff(control_ptr)).tolist()
        return self._preds

    def single_stream_us(self):
        """Simulated makespan with every op on one stream, computed once per host model that can change it. On one
        stream no edge crosses streams, so the event loop never reads the copy engine's constants (sync, copy latency,
        copy streams, merged copies): the with_target copies differing only in them share the figure."""
        if self._single is None:
            from msopt.simulator.simulate import single_stream

            key = self.single_stream_key()
            shared = self.__dict__.setdefault("_arrays", {}).setdefault("single_stream_us", {})  # as task_arrays
            if key not in shared:
                shared[key] = single_stream(self).makespan_us
            self._single = shared[key]
        return self._single

    def single_stream_key(self):
        """The host model single_stream_us depends on: the target without the copy engine's constants."""
        from dataclasses import replace

        return replace(self.target, sync_us=0.0, copy_latency_us=0.0, copy_streams=0, merge_copy_streams=False)

    def lower_bound(self, streams=1):
        """{lower_bound_us, critical_path_us, total_work_us, host_launch_us} on ``streams`` streams (cached)."""
        if self._bound is None:
            self._bound = {}
        if streams not in self._bound:
            from msopt.simulator.simulate import lower_bound

            self._bound[streams] = lower_bound(self, streams)
        return self._bound[streams]

    def with_tasks(self, tasks, original):
        """This model over another run, ``tasks``, whose task i has the figures of this model's task ``original[i]``
        (an int array): a run derived from this one (msopt.planning.written_run). Nothing cached carries over."""
        other = copy.copy(self)
        other.tasks = tasks
        take = original.tolist()
        for name in ("duration", "share", "kernel", "neutral", "flops", "shapes"):
            setattr(other, name, list(map(getattr(self, name).__getitem__, take)))
        out_ptr, out_bytes = self.output_arrays()
        widths = np.diff(out_ptr)[original]
        ptr = np.zeros(len(take) + 1, np.int64)
        np.cumsum(widths, out=ptr[1:])
        starts = np.repeat(out_ptr[:-1][original] - ptr[:-1], widths) + np.arange(ptr[-1], dtype=np.int64)
        other.__dict__.pop("_out_bytes", None)
        other._outputs = (ptr, out_bytes[starts] if len(starts) else out_bytes[:0])
        other._single = other._bound = other._succ = other._succ_arrays = other._preds = None
        other._arrays, other._corner_models = {}, None
        return other

    def with_target(self, target):
        """The same tasks and times under other host constants (``target`` differs only in its host model)."""
        other = copy.copy(self)
        other.target = target
        other._single = None
        other._bound = None
        other._corner_models = None
        return other


def _shared_floats(values):
    """``values.tolist()`` with one float object per distinct value (by bit pattern, so -0.0 and NaNs stay as they
    are): a model repeats the same figures, and a float object costs 24 bytes more than a reference to one."""
    if len(values) < 2:
        return values.tolist()
    bits, index = np.unique(np.ascontiguousarray(values, np.float64).view(np.int64), return_inverse=True)
    distinct = np.empty(len(bits), object)
    distinct[:] = bits.view(np.float64).tolist()
    return distinct[index.reshape(-1)].tolist()


def _segment_sums(values, ptr):
    """Per segment ptr[i]:ptr[i + 1], the exact sum of ``values`` (int64 sums wrap, their differences do not)."""
    total = np.zeros(len(values) + 1, values.dtype)
    np.cumsum(values, out=total[1:])
    return total[ptr[1:]] - total[ptr[:-1]]
