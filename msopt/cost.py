"""The GPU cost model: what one run of a model executes, and each op's time and output bytes on a target GPU.

``CostModel(view, model, target, batch_size, costs)`` is built once per model and target. It
flattens the run of one signature into *tasks* (real ops, function calls inlined, one task per
executed op instance) in a fixed topological order, finds every tensor's shape (``_output_shapes``,
signature shapes, or propagation through common ops and function call arguments), and gives each
task a standalone time, a share of the GPU it can occupy, and its output bytes. The simulator
(msopt.simulate) runs these tasks; nothing here depends on a partition.

Kernel time model (a roofline with occupancy; every constant is in TARGETS or below, sourced):
  full_gpu_us = max(flops / (peak * COMPUTE_EFFICIENCY), bytes / (bandwidth * MEMORY_EFFICIENCY))
  share       = clamp(threads / (sms * threads_per_sm), 1 / sms, 1)   threads = outputs / outputs per thread
  standalone  = max(MIN_KERNEL_US, full_gpu_us / share)
A kernel alone on the GPU uses ``share`` of it for ``standalone`` microseconds; concurrent kernels
share the GPU (see msopt.simulate). Ops that launch no kernel (Const, Identity, ReadVariableOp,
Reshape, control-flow plumbing, ...) take no time. Measured times from a costs file replace the
standalone time of the ops they name.
"""
import gc
import json
import math
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass

from msopt.errors import InputError
from msopt.graph import MAIN
from msopt.protos import DTYPE_NAMES


@dataclass(frozen=True)
class Target:
    """A GPU profile. Peak figures are the vendor data sheets' (dense, boost clock); see the README."""

    name: str
    description: str
    sms: int  # streaming multiprocessors
    fp32_tflops: float  # FP32 CUDA-core peak
    gemm_tflops: float  # what TensorFlow's fp32 Conv/MatMul reach: FP32 on V100/T4, TF32 tensor cores on A100/H100
    fp16_tflops: float  # FP16 tensor-core peak (dense)
    memory_gbs: float  # DRAM bandwidth, GB/s
    launch_us: float = 4.0  # host time to launch one kernel (see README: NVIDIA's CUDA Graphs measurements)
    launch_threads: int = 1  # host threads launching kernels at once (TensorFlow's inter-op pool can use several)
    sync_us: float = 10.0  # cross-stream event: record, wait, and the host learning of completion (assumption)
    copy_latency_us: float = 5.0  # fixed cost of one device-to-device memcpy (assumption, same order as a launch)
    threads_per_sm: int = 2048  # resident threads per SM (CUDA occupancy limit: 2048 Volta/Ampere/Hopper, 1024 Turing)

    @property
    def copy_gbs(self):
        """A device-to-device copy reads and writes every byte: half the DRAM bandwidth."""
        return self.memory_gbs / 2


# Vendor data sheets: NVIDIA V100 (SXM2), A100 (SXM4 80GB), H100 (SXM5), T4 (PCIe 70W).
# SM counts from the architecture whitepapers (Volta GV100, Ampere GA100, Hopper GH100, Turing TU104).
TARGETS = {
    "h100": Target("h100", "NVIDIA H100 SXM5 80GB", sms=132, fp32_tflops=67.0, gemm_tflops=494.5,
                   fp16_tflops=989.5, memory_gbs=3350.0),
    "a100": Target("a100", "NVIDIA A100 SXM4 80GB", sms=108, fp32_tflops=19.5, gemm_tflops=156.0,
                   fp16_tflops=312.0, memory_gbs=2039.0),
    "v100": Target("v100", "NVIDIA V100 SXM2 16GB", sms=80, fp32_tflops=15.7, gemm_tflops=15.7,
                   fp16_tflops=125.0, memory_gbs=900.0),
    "t4": Target("t4", "NVIDIA T4 PCIe 16GB", sms=40, fp32_tflops=8.1, gemm_tflops=8.1,
                 fp16_tflops=65.0, memory_gbs=320.0, threads_per_sm=1024),
}
DEFAULT_TARGET = "h100"  # the current data-centre GPU

# Modelling constants (assumptions, not vendor figures; see the README's calibration section).
COMPUTE_EFFICIENCY = 0.7  # fraction of peak FLOP/s a tuned cuDNN/cuBLAS kernel reaches when it fills the GPU
MEMORY_EFFICIENCY = 0.8  # fraction of DRAM bandwidth a streaming kernel reaches (typical of STREAM-like copies)
MIN_KERNEL_US = 2.0  # shortest kernel execution on the device, launch already paid on the host
GEMM_OUTPUTS_PER_THREAD = 1.3  # outputs per thread of a Conv/MatMul kernel: fitted to Inception-v3's 6.51 ms (README)
MAX_BATCH_SIZE = 2**31 - 1  # larger batches overflow the figures, and no GPU holds them
ELEMENTWISE_OUTPUTS_PER_THREAD = 4  # outputs per thread of elementwise/reduction kernels (Eigen vectorizes by 4)

DTYPE_BYTES = {"float": 4, "double": 8, "int32": 4, "uint8": 1, "int16": 2, "int8": 1, "string": 16, "complex64": 8,
               "int64": 8, "bool": 1, "qint8": 1, "quint8": 1, "qint32": 4, "bfloat16": 2, "qint16": 2, "quint16": 2,
               "uint16": 2, "complex128": 16, "half": 2, "resource": 0, "variant": 0, "uint32": 4, "uint64": 8}

CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
# Ops that launch no kernel: graph plumbing, aliases, metadata and host-side bookkeeping.
NO_KERNEL_OPS = {
    "Const", "HostConst", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault", "_Arg", "_Retval",
    "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "Reshape", "Squeeze", "ExpandDims", "Shape", "ShapeN",
    "Size", "Rank", "StopGradient", "PreventGradient", "Snapshot", "EnsureShape", "Enter", "Exit", "Merge", "Switch",
    "NextIteration", "LoopCond", "ControlTrigger", "RefEnter", "RefExit", "RefMerge", "RefSwitch", "RefNextIteration",
    "RefIdentity", "Assert", "VarIsInitializedOp", "HashTableV2", "MutableHashTableV2", "MutableHashTableOfTensorsV2",
    "Print", "PrintV2", "StringFormat", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename",
}
# Sources every stream can read without a copy: DeepRec duplicates constants into each consuming stream,
# inputs are fed to the consumer, and resource handles are colocated by the constraints.
NEUTRAL_OPS = {"Const", "HostConst", "Placeholder", "PlaceholderWithDefault", "_Arg", "VarHandleOp", "VariableV2",
               "Variable", "HashTableV2", "MutableHashTableV2", "MutableHashTableOfTensorsV2"}
BACK_EDGE_OPS = {"NextIteration", "RefNextIteration"}  # a v1 while loop's back edge: not a dependency of one run
GEMM_OPS = {"Conv2D", "Conv3D", "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "DepthwiseConv2dNative",
            "_FusedConv2D", "_FusedMatMul", "Conv2DBackpropInput", "Einsum"}
GATHER_OPS = {"Gather", "GatherV2", "ResourceGather", "GatherNd", "ResourceGatherNd", "SparseSegmentSum",
              "SparseSegmentMean", "SparseSegmentSqrtN", "EmbeddingLookup", "UnsortedSegmentSum"}
# Output argument names of common multi-output ops, to turn "node:arg:i" references into output indices.
OUTPUT_ARGS = {
    "FusedBatchNorm": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV2": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV3": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3"),
    "Unique": ("y", "idx"), "UniqueV2": ("y", "idx"), "TopKV2": ("values", "indices"),
    "SparseFillEmptyRows": ("output_indices", "output_values", "empty_row_indicator", "reverse_index_map"),
    "SparseReshape": ("output_indices", "output_shape"), "StringSplit": ("indices", "values", "shape"),
    "StringSplitV2": ("indices", "values", "shape"),
}


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector: these passes allocate millions of small acyclic objects,
    and repeated full collections over a large graph would cost more than the passes themselves."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Tasks:
    """The flattened run: parallel lists indexed by task id, ids in a topological order."""

    def __init__(self):
        self.key = []  # GraphView node key of the op
        self.op = []
        self.instance = []  # index into instances: the function call this op instance runs in (0 = main graph)
        self.inputs = []  # [(task, output index)] data inputs
        self.control = []  # [task] control predecessors
        self.instances = [(None, None)]  # (call node key, parent instance) per inlined call; 0 is the main graph


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
        raise InputError(f"{path}: a costs file is {{\"unit\": \"us\", \"ops\": {{\"<node key>\": <time>, ...}}}}")
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
        with gc_paused():
            self._build(view, model, batch_size, costs, signature)

    def _build(self, view, model, batch_size, costs, signature):
        self.signature, roots, feeds = _roots(view, model, signature)
        self.tasks = _flatten(view, roots)
        t = self.tasks
        n = len(t.key)
        self.shapes = _shapes(view, t, feeds)  # per task: [(dtype, shape or None)] by output index
        measured = load_costs(costs) if isinstance(costs, (str, bytes)) or hasattr(costs, "__fspath__") else (costs or {})
        self.duration = [0.0] * n  # standalone microseconds
        self.share = [0.0] * n  # fraction of the GPU the kernel occupies
        self.kernel = [False] * n  # launches a kernel
        self.flops = [0.0] * n
        self.neutral = [t.op[i] in NEUTRAL_OPS for i in range(n)]
        self.unknown_shapes = 0
        self.measured = 0
        self._out_elems = [[_elements(shape, batch_size) for _, shape in outs] for outs in self.shapes]
        self.out_bytes = [[e * DTYPE_BYTES.get(dtype, 4) for e, (dtype, _) in zip(elems, outs)]
                          for elems, outs in zip(self._out_elems, self.shapes)]
        for i in range(n):
            self._cost(i, measured)
        del self._out_elems  # only the costs need element counts
        self._bound = None
        self._single = None
        self._succ = None
        self._preds = None

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
        flops, bytes_moved = _flops_bytes(op, self.view.nodes[key].proto, ins, in_elems, in_bytes, out_elems,
                                          sum(self.out_bytes[i]), self.batch_size)
        dtype = outs[0][0] if outs else "float"
        if op in GEMM_OPS:
            peak = target.fp16_tflops if dtype in ("half", "bfloat16") else target.gemm_tflops
            per_thread = GEMM_OUTPUTS_PER_THREAD
        else:
            peak = target.fp32_tflops
            per_thread = ELEMENTWISE_OUTPUTS_PER_THREAD
        full_us = max(flops / (peak * 1e6 * COMPUTE_EFFICIENCY), bytes_moved / (target.memory_gbs * 1e3 * MEMORY_EFFICIENCY))
        threads = max(1.0, out_elems / per_thread)
        share = min(1.0, max(1.0 / target.sms, threads / (target.sms * target.threads_per_sm)))
        self.flops[i] = flops
        self.share[i] = share
        self.kernel[i] = True
        if key in measured:
            self.duration[i] = measured[key]
            self.measured += 1
        else:
            self.duration[i] = max(MIN_KERNEL_US, full_us / share)

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

    def lower_bound(self):
        """{lower_bound_us, critical_path_us, total_work_us, host_launch_us} (computed once)."""
        if self._bound is None:
            from msopt.simulate import lower_bound

            self._bound = lower_bound(self)
        return self._bound


# -- what runs -----------------------------------------------------------------------------------------
def _roots(view, model, signature):
    """(signature name, main-graph node names to run back from, {node name: signature input shape})."""
    sigs = model.signatures if model is not None else {}
    if signature is not None and signature not in sigs:
        raise InputError(f"no signature '{signature}'; available: {', '.join(sorted(sigs)) or 'none'}")
    if not sigs:
        return None, None, {}
    name = signature or ("serving_default" if "serving_default" in sigs else sorted(sigs)[0])
    sig = sigs[name]
    roots = [info.name.split(":")[0].lstrip("^") for info in sig.outputs.values() if info.name]
    feeds = {}
    for info in sig.inputs.values():
        if info.name:
            shape = None if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim]
            feeds[info.name.split(":")[0]] = (DTYPE_NAMES.get(info.dtype, "float"), shape)
    return name, [r for r in roots if r in view.nodes] or None, feeds


def _is_call(view, node):
    return bool(node.calls) and (node.op in CALL_OPS or node.op in view.functions)


def _flatten(view, roots):
    """Inline every function call reached from ``roots`` (all main-graph nodes if None) into tasks."""
    main = [n for n in view.nodes.values() if n.function == MAIN]
    if roots is not None:
        needed, stack = set(), list(roots)
        while stack:
            key = stack.pop()
            if key in needed or key not in view.nodes:
                continue
            needed.add(key)
            node = view.nodes[key]
            stack.extend(src for src, _ in node.inputs)
            stack.extend(node.control_inputs)
        main = [n for n in main if n.key in needed]
    builder = _Builder(view)
    builder.instantiate(main, 0)
    return builder.finish()


class _Builder:
    """Creates tasks for one graph or function body per call instance and resolves references across calls."""

    def __init__(self, view):
        self.view = view
        self.tasks = Tasks()
        self.index = {}  # (instance, key) -> task id, or ("call", instance id) for a call node
        self.raw = []  # per task: (instance, node) to resolve after all tasks exist
        self.exits = {}  # call instance -> tasks its completion means (returns and control returns)
        self.bodies = {}  # function name -> its real nodes
        for node in view.nodes.values():
            if node.function != MAIN and not node.virtual:
                self.bodies.setdefault(node.function, []).append(node)
        self.active = []  # functions being expanded (a recursive call runs as one opaque op)

    def instantiate(self, nodes, instance):
        view, t = self.view, self.tasks
        for node in nodes:
            if node.virtual:
                continue
            if _is_call(view, node) and node.calls[0] not in self.active:
                child = len(t.instances)
                t.instances.append((node.key, instance))
                self.index[(instance, node.key)] = ("call", child)
                self.active.append(node.calls[0])
                self.instantiate(self.bodies.get(node.calls[0], ()), child)
                self.active.pop()
                self.raw.append(("call", instance, node, child))
                continue
            self.index[(instance, node.key)] = len(t.key)
            t.key.append(node.key)
            t.op.append(node.op)
            t.instance.append(instance)
            t.inputs.append([])
            t.control.append([])
            self.raw.append(("op", instance, node, len(t.key) - 1))

    def finish(self):
        view, t = self.view, self.tasks
        self.call_inputs = {}  # call instance -> resolved data input refs (for its body's _Arg nodes)
        self.call_control = {}
        for kind, instance, node, target in self.raw:
            if kind == "call":
                self.call_inputs[target] = (instance, node)
        index, nodes = self.index, view.nodes
        for kind, instance, node, target in self.raw:
            if kind != "op":
                continue
            inputs = t.inputs[target]
            for src, port in node.inputs:
                found = index.get((instance, src))
                if found.__class__ is int:  # the common case: a plain op of the same graph or body
                    src_op = nodes[src].op
                    if src_op not in BACK_EDGE_OPS:
                        inputs.append((found, port if port.__class__ is int else _output_index(src_op, port)))
                    continue
                ref = self.resolve(instance, src, port)
                if ref is not None and nodes[src].op not in BACK_EDGE_OPS:
                    inputs.append(ref)
            for src in node.control_inputs:
                t.control[target].extend(self.done_tasks(instance, src))
        # Control inputs of a call node hold back the body ops that have no other predecessor.
        held = [(instance, node, child) for kind, instance, node, child in self.raw if kind == "call" and node.control_inputs]
        if held:
            by_instance = {}
            for i, inst in enumerate(t.instance):
                by_instance.setdefault(inst, []).append(i)
            for instance, node, child in held:
                before = [x for src in node.control_inputs for x in self.done_tasks(instance, src)]
                for i in by_instance.get(child, ()):
                    if not t.inputs[i] and not t.control[i]:
                        t.control[i].extend(before)
        return _topological(t)

    def resolve(self, instance, key, port):
        """The (task, output index) a reference to ``key``:``port`` inside ``instance`` reads, or None."""
        view = self.view
        for _ in range(10000):
            node = view.nodes.get(key)
            if node is None:
                return None
            if node.virtual:  # a function argument: what the caller passed
                if instance not in self.call_inputs:
                    return None
                fn = view.functions[node.function]
                position = fn.args.index(key)
                instance, call = self.call_inputs[instance]
                if position >= len(call.inputs):
                    return None
                key, port = call.inputs[position]
                continue
            found = self.index.get((instance, key))
            if found is None:
                return None
            if isinstance(found, tuple):  # a call: follow the callee's return value
                child = found[1]
                fn = view.functions[node.calls[0]]
                out_args = [a.name for a in fn.proto.signature.output_arg]
                index = fn.output_index(port)
                name = out_args[index] if index is not None and index < len(out_args) else None
                if name not in fn.returns:
                    return None
                key, port = fn.returns[name]
                instance = child
                continue
            return found, _output_index(node.op, port)
        return None

    def done_tasks(self, instance, key):
        """Tasks whose completion a control edge from ``key`` waits for."""
        found = self.index.get((instance, key))
        if found is None:
            return []
        if not isinstance(found, tuple):
            return [found]
        child = found[1]
        if child not in self.exits:
            fn = self.view.functions[self.view.nodes[key].calls[0]]
            exits = []
            for src, port in fn.returns.values():
                ref = self.resolve(child, src, port)
                if ref is not None:
                    exits.append(ref[0])
            for name in fn.proto.control_ret.values():
                exits.extend(self.done_tasks(child, f"{fn.name}:{name}"))
            self.exits[child] = exits
        return self.exits[child]


def _output_index(op, port):
    if isinstance(port, int):
        return port
    name, _, index = str(port).partition(":")
    index = int(index or 0)
    args = OUTPUT_ARGS.get(op)
    if args and name in args:
        return args.index(name) + index
    return index


def _topological(t):
    """Renumber tasks in the order TensorFlow's executor would find them ready (FIFO over ready ops)."""
    n = len(t.key)
    succ = [[] for _ in range(n)]
    pending = [0] * n
    for i in range(n):
        inputs, control = t.inputs[i], t.control[i]
        if len(inputs) + len(control) == 1:
            preds = [inputs[0][0]] if inputs else control
        else:
            preds = {src for src, _ in inputs}
            preds.update(control)
        if i in preds:
            preds = [p for p in preds if p != i]
        pending[i] = len(preds)
        for p in preds:
            succ[p].append(i)
    ready = deque(i for i in range(n) if pending[i] == 0)
    order = []
    placed = [False] * n
    while len(order) < n:
        if not ready:  # a cycle left (malformed graph): release the earliest waiting op
            ready.append(next(i for i in range(n) if not placed[i]))
        i = ready.popleft()
        if placed[i]:
            continue
        placed[i] = True
        order.append(i)
        for j in succ[i]:
            pending[j] -= 1
            if pending[j] == 0:
                ready.append(j)
    new = [0] * n
    for position, i in enumerate(order):
        new[i] = position
    out = Tasks()
    out.instances = t.instances
    for i in order:
        out.key.append(t.key[i])
        out.op.append(t.op[i])
        out.instance.append(t.instance[i])
        # Drop edges that would point backwards (only left by a cycle) so that every edge goes forward.
        out.inputs.append([(new[s], p) for s, p in t.inputs[i] if new[s] < new[i]])
        out.control.append(sorted({new[s] for s in t.control[i] if new[s] < new[i]}))
    return out


# -- shapes --------------------------------------------------------------------------------------------
def _shapes(view, t, feeds):
    """Per task, [(dtype, shape)] by output index: signature inputs, recorded shapes, then propagation."""
    nodes = view.nodes
    result = []
    append = result.append
    for i, key in enumerate(t.key):
        node = nodes[key]
        proto = node.proto
        if feeds and node.function == MAIN and node.name in feeds:
            append([feeds[node.name]])
            continue
        recorded = _recorded_shapes(proto)
        dtypes = _output_dtypes(proto)
        if recorded is not None and None not in recorded:
            if len(dtypes) < len(recorded):  # dtypes not in the attributes: the first input's, else float
                inputs = t.inputs[i]
                first = result[inputs[0][0]] if inputs else ()
                port = inputs[0][1] if inputs else 0
                fallback = first[port][0] if port < len(first) else "float"
                dtypes = dtypes + [dtypes[0] if dtypes else fallback] * (len(recorded) - len(dtypes))
            append(list(zip(dtypes, recorded)))
            continue
        ins = [result[src][port] if port < len(result[src]) else ("float", None) for src, port in t.inputs[i]]
        in_protos = [nodes[t.key[src]].proto for src, _ in t.inputs[i]]
        append(_propagate(node.op, proto, ins, dtypes, in_protos))
    return result


def _recorded_shapes(proto):
    if "_output_shapes" not in proto.attr:
        return None
    shapes = []
    for s in proto.attr["_output_shapes"].list.shape:
        shapes.append(None if s.unknown_rank else [d.size for d in s.dim])
    return shapes


def _output_dtypes(proto):
    attr = proto.attr
    for name in ("T", "dtype", "out_type", "DstT", "Tout", "output_type", "Tvalues"):
        if name in attr:
            value = attr[name]
            if value.WhichOneof("value") == "type":
                return [DTYPE_NAMES.get(value.type, "float")]
            if value.WhichOneof("value") == "list" and value.list.type:
                return [DTYPE_NAMES.get(x, "float") for x in value.list.type]
    return []


ELEMENTWISE_SAME_SHAPE = {
    "Relu", "Relu6", "Elu", "Selu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Neg", "Abs", "Exp", "Log", "Sqrt",
    "Rsqrt", "Square", "Cast", "Identity", "ReadVariableOp", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3",
    "BiasAdd", "LeakyRelu", "Softplus", "Floor", "Ceil", "Round", "StopGradient", "Snapshot", "Erf", "Sign", "IsNan",
    "LogicalNot", "ZerosLike", "OnesLike", "Reciprocal", "Gelu", "Swish", "ClipByValue", "L2Loss",
}
BROADCAST_OPS = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "Pow", "SquaredDifference",
                 "FloorDiv", "FloorMod", "Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual",
                 "LogicalAnd", "LogicalOr", "DivNoNan", "SelectV2", "Select", "AddN"}


def _propagate(op, proto, ins, dtypes, in_protos):
    """Output (dtype, shape) list for common ops from their inputs; shape None where unknown."""
    attr = proto.attr
    dtype = dtypes[0] if dtypes else (ins[0][0] if ins else "float")
    first = ins[0][1] if ins else None
    if op in ("Placeholder", "PlaceholderWithDefault", "VarHandleOp", "VariableV2", "Variable"):
        s = attr["shape"].shape if "shape" in attr else None
        return [(dtype, None if s is None or s.unknown_rank else [d.size for d in s.dim])]
    if op in ("Const", "HostConst") and "value" in attr:
        tensor = attr["value"].tensor
        return [(DTYPE_NAMES.get(tensor.dtype, "float"), [d.size for d in tensor.tensor_shape.dim])]
    if op in ELEMENTWISE_SAME_SHAPE:
        return [(dtype, first)]
    if op in BROADCAST_OPS:
        return [(dtype, _broadcast([s for _, s in ins[-2:]] if op in ("Select", "SelectV2") else [s for _, s in ins]))]
    if op in ("MatMul", "_FusedMatMul") and len(ins) >= 2 and ins[0][1] is not None and ins[1][1] is not None:
        a, b = ins[0][1], ins[1][1]
        if len(a) != 2 or len(b) != 2:
            raise InputError(f"node '{proto.name}' ({op}) multiplies operands of shapes {a} and {b}: both must be matrices")
        m = a[1] if _flag(attr, "transpose_a") else a[0]
        n = b[0] if _flag(attr, "transpose_b") else b[1]
        return [(dtype, [m, n])]
    if op in ("Conv2D", "_FusedConv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool") and first and len(first) == 4:
        return [(dtype, _window_shape(op, attr, first, ins[1][1] if len(ins) > 1 else None))]
    if op == "ConcatV2" and len(ins) >= 2:
        shapes = [s for _, s in ins[:-1]]
        if all(shapes) and len({len(s) for s in shapes}) == 1:
            axis = _const_int(in_protos[-1])
            out = list(shapes[0])
            if axis is not None and out:
                axis %= len(out)
                sizes = [s[axis] for s in shapes]
                out[axis] = sum(sizes) if all(x is not None and x >= 0 for x in sizes) else -1
                return [(dtype, out)]
        return [(dtype, None)]
    if op in ("Mean", "Sum", "Max", "Min", "Prod", "ArgMax", "ArgMin") and first:
        if _flag(attr, "keep_dims"):
            return [(dtype, [1] * len(first))]
        return [(dtype, first[:1] if op not in ("ArgMax", "ArgMin") else first[:-1])]
    if op == "Pack" and first is not None:
        return [(dtype, [len(ins)] + list(first))]
    if op in ("Shape", "Size", "Rank"):
        return [("int32", [len(first)] if first is not None else None)]
    return [(dtype, None)]


def _flag(attr, name):
    """A boolean attribute, False when absent (never index a proto map with a missing key: it inserts one)."""
    return name in attr and attr[name].b


def _const_int(proto):
    """The value of a scalar integer Const (a ConcatV2 axis), else None."""
    if proto is None or proto.op != "Const" or "value" not in proto.attr:
        return None
    tensor = proto.attr["value"].tensor
    values = list(tensor.int_val) or list(tensor.int64_val)
    return values[0] if len(values) == 1 else None


def _broadcast(shapes):
    if not shapes or any(s is None for s in shapes):
        return None
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    known = shapes
    rank = max(len(s) for s in known)
    out = []
    for k in range(rank):
        dims = [s[k - rank + len(s)] for s in known if k - rank + len(s) >= 0]
        big = [d for d in dims if d != 1]
        out.append(big[0] if big else 1)
    return out


def _window_shape(op, attr, x, w):
    nchw = "data_format" in attr and attr["data_format"].s == b"NCHW"
    h, wd = (x[2], x[3]) if nchw else (x[1], x[2])
    strides = list(attr["strides"].list.i) if "strides" in attr else [1, 1, 1, 1]
    if len(strides) != 4 or min(strides) < 1:
        return None  # TensorFlow refuses such a node; its size stays unknown here
    sh, sw = (strides[2], strides[3]) if nchw else (strides[1], strides[2])
    if op in ("MaxPool", "AvgPool"):
        k = list(attr["ksize"].list.i) if "ksize" in attr else [1, 1, 1, 1]
        if len(k) != 4:
            return None
        kh, kw = (k[2], k[3]) if nchw else (k[1], k[2])
        channels = x[1] if nchw else x[3]
    else:
        if not w or len(w) != 4:
            return None
        kh, kw = w[0], w[1]
        channels = w[2] * w[3] if op == "DepthwiseConv2dNative" else w[3]
    same = "padding" not in attr or attr["padding"].s != b"VALID"

    def out(size, k, s):
        if size is None or size < 0:
            return -1
        return -(-size // s) if same else (size - k) // s + 1

    oh, ow = out(h, kh, sh), out(wd, kw, sw)
    return [x[0], channels, oh, ow] if nchw else [x[0], oh, ow, channels]


def _elements(shape, batch_size):
    """Element count, the unknown leading dimension as the batch and other unknown dimensions as 1."""
    if shape is None:
        return batch_size
    n = 1
    for k, d in enumerate(shape):
        n *= d if d is not None and d >= 0 else (batch_size if k == 0 else 1)
    return n


def _bytes(dtype, shape, batch_size):
    return _elements(shape, batch_size) * DTYPE_BYTES.get(dtype, 4)


def _flops_bytes(op, proto, ins, in_elems, in_bytes, out_elems, out_bytes, batch_size):
    """(floating-point operations, bytes read and written) of one op; resource and variant inputs count 0 bytes."""
    w = ins[1][1] if len(ins) > 1 else None
    if op in ("Conv2D", "_FusedConv2D", "Conv2DBackpropInput") and w and len(w) == 4:
        return 2.0 * out_elems * w[0] * w[1] * w[2], in_bytes + out_bytes
    if op == "DepthwiseConv2dNative" and w and len(w) == 4:
        return 2.0 * out_elems * w[0] * w[1], in_bytes + out_bytes
    if op in ("MatMul", "_FusedMatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3") and ins and ins[0][1]:
        a = ins[0][1]
        k = a[-2] if op in ("MatMul", "_FusedMatMul") and _flag(proto.attr, "transpose_a") and len(a) > 1 else a[-1]
        return 2.0 * out_elems * max(k if k and k > 0 else 1, 1), in_bytes + out_bytes
    if op in ("MaxPool", "AvgPool"):
        window = list(proto.attr["ksize"].list.i) if "ksize" in proto.attr else []
        window = window if len(window) == 4 else [1, 3, 3, 1]  # TensorFlow refuses other lengths
        return out_elems * float(math.prod(window)), in_bytes + out_bytes
    if op in GATHER_OPS:  # reads only the rows it gathers
        index_bytes = _bytes(*ins[1], batch_size) if len(ins) > 1 else 0
        return 0.0, 2 * out_bytes + index_bytes
    if op.startswith("FusedBatchNorm"):
        return 5.0 * out_elems, in_bytes + out_bytes
    return float(max(out_elems, in_elems)), in_bytes + out_bytes
