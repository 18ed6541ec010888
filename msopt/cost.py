"""The GPU cost model: each op instance of one run, its standalone time, GPU share and output bytes on a target.

``CostModel(view, model, target, batch_size, costs)`` is built once per model and target. It
takes the flattened run of one signature (msopt.flat: one task per executed op instance, calls
and functional control flow opened, in a fixed topological order), the shape of every tensor
(msopt.shapes) and gives each task a standalone time and GPU share from the roofline of
msopt.kernels on a GPU of msopt.targets. The simulator (msopt.simulate) runs these tasks;
nothing here depends on a partition.

A kernel alone on the GPU uses ``share`` of it for ``standalone`` microseconds; concurrent kernels
share the GPU (see msopt.simulate). Ops that launch no kernel (Const, Identity, ReadVariableOp,
Reshape, control-flow plumbing, functional If/While whose functions' ops are the kernels, ...)
take no time. Measured times from a costs file replace the standalone time of the ops they name.
"""

import copy
import json
import math

from msopt.errors import InputError
from msopt.flat import Tasks, flat_run
from msopt.gc_pause import gc_paused
from msopt.kernels import (  # noqa: F401  (re-exported: callers import the model's constants from here)
    COMPUTE_EFFICIENCY,
    DTYPE_BYTES,
    ELEMENTWISE_OUTPUTS_PER_THREAD,
    GATHER_OPS,
    GEMM_OPS,
    GEMM_OUTPUTS_PER_THREAD,
    MAX_BATCH_SIZE,
    MEMORY_EFFICIENCY,
    MIN_KERNEL_US,
    elements,
    flops_bytes,
    roofline,
)
from msopt.op_tables import BACK_EDGE_OPS, CALL_OPS, NEUTRAL_OPS, NO_KERNEL_OPS, OUTPUT_ARGS  # noqa: F401
from msopt.shapes import infer_shapes
from msopt.targets import DEFAULT_TARGET, TARGETS, Target  # noqa: F401

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


def load_costs(path):
    """Read a measured costs file: {"unit": "us"|"ms"|"s"|"ns", "ops": {node key: time}} -> {key: microseconds}."""
    scale = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read costs file: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: costs file is not JSON text: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: costs file nests too deep") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), dict):
        raise InputError(f'{path}: a costs file is {{"unit": "us", "ops": {{"<node key>": <time>, ...}}}}')
    unit = doc.get("unit", "us")
    if unit not in scale:
        raise InputError(f"{path}: unknown unit '{unit}'; use one of: {', '.join(scale)}")
    times = {}
    for key, value in doc["ops"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value < 0:
            raise InputError(f"{path}: op '{key}' has time {value!r}; times are non-negative numbers")
        times[key] = value * scale[unit]
    return times


def _finite(value):
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


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
        self.host_ranges = None  # {constant: (lo, hi)} of the uncertain host constants (None: msopt.host_model's)
        with gc_paused():
            self._build(view, model, batch_size, costs, signature)

    def _build(self, view, model, batch_size, costs, signature):
        self.signature, self.tasks, feeds = flat_run(view, model, signature)
        t = self.tasks
        n = len(t.key)
        self.shapes = infer_shapes(view, t, feeds)  # per task: [(dtype, shape or None)] by output index
        measured = (
            load_costs(costs) if isinstance(costs, (str, bytes)) or hasattr(costs, "__fspath__") else (costs or {})
        )
        self.duration = [0.0] * n  # standalone microseconds
        self.share = [0.0] * n  # fraction of the GPU the kernel occupies
        self.kernel = [False] * n  # launches a kernel
        self.flops = [0.0] * n
        self.neutral = [t.op[i] in NEUTRAL_OPS for i in range(n)]
        self.unknown_shapes = 0
        self.measured = 0
        self._out_elems = [[elements(shape, batch_size) for _, shape in outs] for outs in self.shapes]
        self.out_bytes = [
            [e * DTYPE_BYTES.get(dtype, 4) for e, (dtype, _) in zip(elems, outs)]
            for elems, outs in zip(self._out_elems, self.shapes)
        ]
        for i in range(n):
            self._cost(i, measured)
        del self._out_elems  # only the costs need element counts
        self._bound = None
        self._single = None
        self._succ = None
        self._preds = None
        self._arrays = {}  # the simulator's arrays (msopt.simulate.task_arrays), shared with with_target's copies

    # -- per task ------------------------------------------------------------------------------
    def _cost(self, i, measured):
        t, target = self.tasks, self.target
        op, key = t.op[i], t.key[i]
        if op in NO_KERNEL_OPS:
            if key in measured and measured[key] > 0:  # a measured time wins even for an op we thought free
                self.duration[i], self.share[i], self.kernel[i] = measured[key], 1.0 / target.sms, True
                self.measured += 1
            return
        outs = self.shapes[i]
        if not outs or any(shape is None for _, shape in outs):
            self.unknown_shapes += 1
        out_elems = sum(self._out_elems[i])
        ins, in_elems, in_bytes = [], 0, 0
        for src, port in t.inputs[i]:
            if port < len(self.shapes[src]):
                ins.append(self.shapes[src][port])
                in_elems += self._out_elems[src][port]
                in_bytes += self.out_bytes[src][port]
            else:
                ins.append(("float", None))
        flops, bytes_moved = flops_bytes(
            op, self.view.nodes[key].proto, ins, in_elems, in_bytes, out_elems, sum(self.out_bytes[i]), self.batch_size
        )
        share, standalone = roofline(op, outs[0][0] if outs else "float", flops, bytes_moved, out_elems, target)
        self.flops[i] = flops
        self.share[i] = share
        self.kernel[i] = True
        if key in measured:
            self.duration[i] = measured[key]
            self.measured += 1
        else:
            self.duration[i] = standalone

    # -- queries -----------------------------------------------------------------------------------
    def __len__(self):
        return len(self.tasks.key)

    def time_us(self, key):
        """Total standalone time of the op instances of node ``key`` (0 if it does not run)."""
        return sum(d for k, d in zip(self.tasks.key, self.duration) if k == key)

    def node_times(self):
        """{node key: standalone microseconds} summed over the op's instances."""
        times = {}
        for k, d in zip(self.tasks.key, self.duration):
            times[k] = times.get(k, 0.0) + d
        return times

    def successors(self):
        """Per task, [(consumer task, output index or -1 for a control edge)], one entry per edge."""
        if self._succ is None:
            t = self.tasks
            succ = [[] for _ in t.key]
            count = [0] * len(t.key)
            for j in range(len(t.key)):
                for i, port in t.inputs[j]:
                    succ[i].append((j, port))
                for i in t.control[j]:
                    succ[i].append((j, -1))
                count[j] = len(t.inputs[j]) + len(t.control[j])
            self._succ, self._preds = succ, count
        return self._succ

    def pred_count(self):
        self.successors()
        return self._preds

    def single_stream_us(self):
        """Simulated makespan with every op on one stream (computed once)."""
        if self._single is None:
            from msopt.simulate import single_stream

            self._single = single_stream(self).makespan_us
        return self._single

    def lower_bound(self, streams=1):
        """{lower_bound_us, critical_path_us, total_work_us, host_launch_us} on ``streams`` streams (cached)."""
        if self._bound is None:
            self._bound = {}
        if streams not in self._bound:
            from msopt.simulate import lower_bound

            self._bound[streams] = lower_bound(self, streams)
        return self._bound[streams]

    def with_target(self, target):
        """The same tasks and times under other host constants (``target`` differs only in its host model)."""
        other = copy.copy(self)
        other.target = target
        other._single = None
        other._bound = None
        other._corner_models = None
        return other
