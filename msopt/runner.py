"""Execute a model the way its partition says: streams become devices, inputs are checked, steps are timed.

Stream ids turn into device strings before TensorFlow optimizes the graph (grappler's fusions drop
``_stream_id`` but keep devices). On a GPU each stream is a virtual GPU of its own (one compute
stream each); on the CPU each stream is a logical CPU device: the same code path. TF1 graphs run
in a v1 Session built from that device configuration; TF2 SavedModels run their signature
functions eagerly, as a plain TensorFlow loop does, and for traces and profiles also in such a
Session, whose step statistics report where each op really ran.
"""
import contextlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from msopt.errors import InputError
from msopt.execute import Executable, error_line, import_tensorflow
from msopt.inputs import InputGenerator, check_input, read_npz  # noqa: F401 (check_input: re-exported)
from msopt.workdir import absolute

DEFAULT_GPU_MEMORY_FRACTION = 0.9  # of each GPU, split among its virtual devices and the replicas sharing it
# CUDA's stream priorities: cudaDeviceGetStreamPriorityRange reports least 0 and greatest -5 on current
# GPUs (narrower, e.g. [-1, 0] or [-2, 0], on older ones; TensorFlow checks the real range and says
# "Priority p is outside the range of supported priorities").
GREATEST_PRIORITY, LEAST_PRIORITY = -5, 0


def set_visible_gpus(gpus):
    """``--gpus 0,1``: CUDA_VISIBLE_DEVICES semantics; must happen before TensorFlow is imported.

    CUDA_DEVICE_ORDER defaults to PCI_BUS_ID here (unless already set), so that the indices are
    nvidia-smi's and every GPU msopt reports is the one nvidia-smi shows under that index.
    """
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    if gpus is None:
        return None
    indices = [g.strip() for g in gpus.split(",") if g.strip()]
    if not indices or not all(g.isdigit() for g in indices):
        raise InputError(f"--gpus '{gpus}': expected GPU indices such as 0,1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(indices)
    return indices


def request_allow_growth():
    """``--allow-growth``: TF_FORCE_GPU_ALLOW_GROWTH=true, read by TensorFlow's GPU allocator when it creates
    each allocator (gpu_bfc_allocator.cc), eager context included, where set_memory_growth is refused
    once virtual devices exist (context.py). Must be set before TensorFlow creates its GPU devices."""
    os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"


def parse_priorities(text, streams):
    """``--stream-priority -1,0,0,0``: one CUDA stream priority per stream (lower runs first), in CUDA's range."""
    if text is None:
        return None
    try:
        values = [int(p) for p in text.split(",")]
    except ValueError:
        raise InputError(f"--stream-priority '{text}': expected integers separated by commas") from None
    for value in values:
        if not GREATEST_PRIORITY <= value <= LEAST_PRIORITY:
            raise InputError(f"--stream-priority: priority {value} is outside CUDA's range "
                             f"[{GREATEST_PRIORITY}, {LEAST_PRIORITY}] ({GREATEST_PRIORITY} runs first, "
                             f"{LEAST_PRIORITY} is the default)")
    if len(values) == 1:
        values = values * streams
    if len(values) != streams:
        raise InputError(f"--stream-priority gives {len(values)} priorities for {streams} streams")
    return values


@contextlib.contextmanager
def tensorflow_errors(what):
    """A TensorFlow error raised while creating devices, a context or a Session -> InputError with its cause."""
    try:
        yield
    except Exception as e:
        if type(e).__module__.startswith("tensorflow"):
            raise InputError(f"TensorFlow cannot {what}: {error_line(e)}") from None
        raise


def hide_gpus(tf):
    """Make TensorFlow's context show no GPU (before it initializes; a no-op when it already shows none)."""
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # the context is initialized already: fine only if it shows no GPU
        if tf.config.get_visible_devices("GPU"):
            raise InputError("--device cpu: TensorFlow already initialized its GPUs in this process") from None


def configure_devices(tf, streams, device="auto", memory_fraction=None, allow_growth=False, priorities=None,
                      replicas=1):
    """Make ``streams`` logical devices and return (device type, Session ConfigProto) built from them.

    ``replicas``: processes sharing each GPU (``--replicas``); the default memory share is divided by it.
    With several GPUs the streams are spread by msopt.gpu_layout's rule; ``gpu_layout(tf, streams)``
    gives the same layout afterwards.
    """
    from tensorflow.python.eager import context

    gpus = tf.config.list_physical_devices("GPU")
    device = ("gpu" if gpus else "cpu") if device == "auto" else device
    if device == "gpu":
        if not gpus:
            raise InputError("--device gpu: TensorFlow sees no GPU (is tensorflow[and-cuda] installed, "
                             "is CUDA_VISIBLE_DEVICES or --gpus hiding it?)")
        if allow_growth:
            request_allow_growth()
        _configure_gpus(tf, gpus, streams, memory_fraction, priorities, replicas)
    else:
        if memory_fraction is not None or priorities is not None:
            raise InputError("--gpu-memory-fraction and --stream-priority apply to GPUs only (--device cpu)")
        hide_gpus(tf)  # unassigned ops and --compare-to models must not land on a GPU the partition avoids
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(streams)])
    with tensorflow_errors("create its devices"):
        context.context().ensure_initialized()
    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(context.context().config)
    config.allow_soft_placement = device == "gpu"  # ops without a GPU kernel (strings, hashing) stay on the CPU
    if device == "cpu":
        config.device_count["GPU"] = 0
    elif allow_growth:
        config.gpu_options.allow_growth = True
    return device, config


def bitwise_gpu_numerics(tf):
    """What a bitwise --compare-to on a GPU needs, set before the first step runs; returned for the report.

    TF_CUDNN_USE_AUTOTUNE=0 must already be in the environment (msopt run sets it before TensorFlow starts)."""
    tf.config.experimental.enable_tensor_float_32_execution(False)  # TF32 rounds float32 matmuls/convolutions
    tf.config.experimental.enable_op_determinism()  # no atomics-based reductions; may refuse some ops
    return {"tensor_float_32": False, "op_determinism": True,
            "cudnn_autotune": os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1") != "0",
            "note": "TF32 off, op determinism on and cuDNN autotuning off for the comparison: "
                    "the measured latency is that of this deterministic configuration"}


def gpu_layout(tf, streams):
    """The msopt.gpu_layout.GpuLayout of ``streams`` over the GPUs TensorFlow sees, with their UUIDs when known."""
    from msopt.gpu_inventory import visible_gpus
    from msopt.gpu_layout import GpuLayout

    count = len(tf.config.get_visible_devices("GPU"))
    known = visible_gpus()
    return GpuLayout(streams, count, [g.uuid for g in known[:count]] if len(known) >= count else None)


def _configure_gpus(tf, gpus, streams, memory_fraction, priorities, replicas):
    if streams == 1 and memory_fraction is None and priorities is None and replicas == 1:
        return  # one stream in one process: each GPU whole (growing on demand with --allow-growth)
    from msopt.gpu_inventory import memory_mb

    plan = virtual_devices(memory_mb(len(gpus)), streams, memory_fraction, replicas, priorities)
    for gpu, devices in zip(gpus, plan):
        tf.config.set_logical_device_configuration(gpu, [
            tf.config.LogicalDeviceConfiguration(memory_limit=limit, experimental_priority=priority)
            for limit, priority in devices])


def virtual_devices(totals, streams, memory_fraction=None, replicas=1, priorities=None):
    """Per GPU (``totals``: its MB), the (memory limit MB, priority) of each virtual device, in TensorFlow's order.

    Each GPU's share (``memory_fraction``, default 0.9 / ``replicas``, as every replica uses every
    GPU) is split evenly among its ceil(streams / G) devices; stream k is GPU k mod G's device
    k // G (msopt.gpu_layout). A padding device (no stream) gets the least priority.
    """
    from msopt.gpu_layout import GpuLayout

    layout = GpuLayout(streams, len(totals))
    fraction = DEFAULT_GPU_MEMORY_FRACTION / replicas if memory_fraction is None else memory_fraction
    plan = []
    for g, total in enumerate(totals):
        limit = max(1, int(total * fraction / layout.per_gpu))
        plan.append([(limit, None if priorities is None else LEAST_PRIORITY if k is None else priorities[k])
                     for k in layout.streams_on(g)])
    return plan


def place(model, view, streams, device_type, workdir, layout=None):
    """The model with each stream's nodes on its device (written to ``workdir``), the partition and merges.

    ``layout`` (a msopt.gpu_layout.GpuLayout) names the GPU devices when streams are spread over GPUs."""
    from msopt import emit
    from msopt.load import load
    from msopt.rules import PartitionOptions, make_plan

    plan, merges = make_plan("none", view, PartitionOptions(streams=streams))
    if not plan:
        return model, plan, merges
    out = Path(workdir) / Path(model.path).name
    devices = layout if device_type == "gpu" and layout is not None else device_type
    emit.write(model, plan, out, placement="device", device_type=devices)
    return load(out, ",".join(model.tags) if model.format == "saved_model" else None), plan, merges


def streams_in(view):
    """The number of streams a model's existing ``_stream_id`` attributes name (at least 1)."""
    return max((n.stream for n in view.real_nodes() if n.stream is not None), default=0) + 1


# -- inputs ---------------------------------------------------------------------------------------
def choose_signature(specs, name):
    if not specs:
        raise InputError("the model has no signature to run")
    if name is None:
        if "serving_default" in specs:
            return "serving_default"
        if len(specs) == 1:
            return next(iter(specs))
        raise InputError(f"several signatures ({', '.join(specs)}); choose one with --signature")
    if name not in specs:
        raise InputError(f"unknown signature '{name}'; available: {', '.join(specs)}")
    return name


def make_records(inputs, batch_size, records, seed, npz=None, view=None):
    """The input batches to cycle through: ``records`` generated ones (shaped by the graph ``view``),
    or the one batch read from ``npz``."""
    if npz is None:
        generate = InputGenerator(inputs, view)
        return [generate(batch_size, seed + k) for k in range(records)]
    return [read_npz(npz, inputs)]


def batch_of(feeds, default):
    first = next(iter(feeds.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else default


# -- measurement ------------------------------------------------------------------------------------
def measure(steps, iterations, warmup, tick=None):
    """Run ``steps`` (callables, cycled) ``warmup`` then ``iterations`` times; returns per-step seconds and wall time."""
    count = len(steps)
    for i in range(warmup):
        steps[i % count]()
    latencies = [0.0] * iterations
    clock = time.perf_counter
    started = clock()
    for i in range(iterations):
        t = clock()
        steps[i % count]()
        latencies[i] = clock() - t
        if tick is not None:
            tick(i)
    return latencies, clock() - started, started


def latency_summary(latencies, wall, batch_size):
    ms = np.asarray(latencies) * 1e3
    steps = len(latencies)
    return {
        "steps": steps,
        "batch_size": batch_size,
        "latency_ms": {
            "mean": _r(ms.mean()), "p50": _r(np.percentile(ms, 50)), "p95": _r(np.percentile(ms, 95)),
            "p99": _r(np.percentile(ms, 99)), "min": _r(ms.min()), "max": _r(ms.max()),
        },
        "throughput": {"steps_per_s": _r(steps / wall), "records_per_s": _r(steps * batch_size / wall)},
        "wall_s": _r(wall),
    }


def _r(x):
    return round(float(x), 4)


# -- one process, end to end ---------------------------------------------------------------------------
class Runner:
    """A model placed on ``streams`` devices and loaded in TensorFlow, ready to run its signatures."""

    def __init__(self, model, view, streams, device="auto", memory_fraction=None, allow_growth=False,
                 priorities=None, intra_op_threads=0, inter_op_threads=0, replicas=1):
        self.tf = tf = import_tensorflow()
        self.device_type, self.config = configure_devices(tf, streams, device, memory_fraction, allow_growth, priorities,
                                                          replicas)
        self.layout = gpu_layout(tf, streams) if self.device_type == "gpu" else None
        self.config.intra_op_parallelism_threads = intra_op_threads  # 0: TensorFlow's choice (all cores)
        self.config.inter_op_parallelism_threads = inter_op_threads
        self._session = self.executable = None
        # A private working directory while the model runs (a graph's save op writes to relative paths).
        self._workdir = tempfile.TemporaryDirectory(prefix="msopt-run-")
        self._cwd = os.getcwd()
        model = absolute(model)
        os.chdir(self._workdir.name)
        try:
            self.model, self.partition, self.merges = place(model, view, streams, self.device_type, self._workdir.name,
                                                            self.layout)
            self.view = view
            self.streams = streams
            # TF2 SavedModels run their signature functions eagerly, as a plain TensorFlow loop does.
            with tensorflow_errors("create a Session or context for the model"):
                self.executable = Executable(self.model, streams, self.device_type, session_config=self.config, eager=True)
            self.specs = self.executable.specs
        except BaseException:
            self.close()
            raise

    @property
    def session_executable(self):
        """The model in a v1 Session (TF2 too: functions inlined), for step statistics and cutting at tensors."""
        if getattr(self.executable, "session", None) is not None:
            return self.executable
        if self._session is None:
            with tensorflow_errors("create a Session for the model"):
                self._session = Executable(self.model, self.streams, self.device_type, session_config=self.config)
        return self._session

    def load_other(self, model):
        """Another model (e.g. the unpartitioned original) with the same device configuration."""
        with tensorflow_errors("create a Session or context for the model"):
            return Executable(model, self.streams, self.device_type, session_config=self.config, eager=True)

    def traced_steps(self, signature, feeds, count):
        """RunMetadata of ``count`` fully traced steps (step statistics, per device)."""
        v1 = self.tf.compat.v1
        spec = self.specs[signature]
        options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
        metadata = v1.RunMetadata()
        call = self.session_executable.tensor_step([o["name"] for o in spec["outputs"].values()],
                                           [spec["inputs"][k]["name"] for k in feeds], options, metadata)
        collected = []
        for _ in range(count):
            call(*feeds.values())
            collected.append(v1.RunMetadata.FromString(metadata.SerializeToString()))
        return collected

    def close(self):
        try:
            for executable in (self.executable, self._session):
                if executable is not None:
                    executable.close()
        finally:
            os.chdir(self._cwd)
            with contextlib.suppress(OSError):  # already gone when a replica run's directory went first
                self._workdir.cleanup()
