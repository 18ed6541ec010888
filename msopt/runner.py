"""Execute a model the way its partition says: streams become devices, inputs are checked, steps are timed.

Stream ids turn into device strings before TensorFlow optimizes the graph (grappler's fusions drop
``_stream_id`` but keep devices). On a GPU each stream is a virtual GPU of its own (one compute
stream each); on the CPU each stream is a logical CPU device: the same code path. TF1 graphs run
in a v1 Session built from that device configuration; TF2 SavedModels run their signature
functions eagerly, as a plain TensorFlow loop does, and for traces and profiles also in such a
Session, whose step statistics report where each op really ran.
"""
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from msopt.errors import InputError
from msopt.execute import Executable, import_tensorflow
from msopt.inputs import InputGenerator, check_input, read_npz  # noqa: F401 (check_input: re-exported)

DEFAULT_GPU_MEMORY_FRACTION = 0.9  # of each GPU, split among the streams when they are virtual GPUs


def set_visible_gpus(gpus):
    """``--gpus 0,1``: CUDA_VISIBLE_DEVICES semantics; must happen before TensorFlow is imported."""
    if gpus is None:
        return
    indices = [g.strip() for g in gpus.split(",") if g.strip()]
    if not all(g.isdigit() for g in indices):
        raise InputError(f"--gpus '{gpus}': expected GPU indices such as 0,1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(indices)


def parse_priorities(text, streams):
    """``--stream-priority -1,0,0,0``: one CUDA stream priority per stream (lower runs first)."""
    if text is None:
        return None
    try:
        values = [int(p) for p in text.split(",")]
    except ValueError:
        raise InputError(f"--stream-priority '{text}': expected integers separated by commas") from None
    if len(values) == 1:
        values = values * streams
    if len(values) != streams:
        raise InputError(f"--stream-priority gives {len(values)} priorities for {streams} streams")
    return values


def configure_devices(tf, streams, device="auto", memory_fraction=None, allow_growth=False, priorities=None):
    """Make ``streams`` logical devices and return (device type, Session ConfigProto) built from them."""
    from tensorflow.python.eager import context

    gpus = tf.config.list_physical_devices("GPU")
    device = ("gpu" if gpus else "cpu") if device == "auto" else device
    if device == "gpu":
        if not gpus:
            raise InputError("--device gpu: TensorFlow sees no GPU (is tensorflow[and-cuda] installed, "
                             "is CUDA_VISIBLE_DEVICES or --gpus hiding it?)")
        _configure_gpus(tf, gpus, streams, memory_fraction, allow_growth, priorities)
    else:
        if memory_fraction is not None or priorities is not None:
            raise InputError("--gpu-memory-fraction and --stream-priority apply to GPUs only (--device cpu)")
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(streams)])
    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(context.context().config)
    config.allow_soft_placement = device == "gpu"  # ops without a GPU kernel (strings, hashing) stay on the CPU
    if device == "cpu":
        config.device_count["GPU"] = 0
    elif allow_growth:
        config.gpu_options.allow_growth = True
    return device, config


def _configure_gpus(tf, gpus, streams, memory_fraction, allow_growth, priorities):
    if streams == 1 and memory_fraction is None and priorities is None:
        for gpu in gpus:  # one stream: the whole GPU, growing on demand if asked
            if allow_growth:
                tf.config.experimental.set_memory_growth(gpu, True)
        return
    from msopt.mps import gpu_memory_mb

    fraction = DEFAULT_GPU_MEMORY_FRACTION if memory_fraction is None else memory_fraction
    totals = gpu_memory_mb(len(gpus))
    for gpu, total in zip(gpus, totals):
        limit = max(1, int(total * fraction / streams))
        tf.config.set_logical_device_configuration(gpu, [
            tf.config.LogicalDeviceConfiguration(memory_limit=limit,
                                                 experimental_priority=None if priorities is None else priorities[k])
            for k in range(streams)])


def place(model, view, streams, device_type, workdir):
    """The model with each stream's nodes on its device (written to ``workdir``), the partition and merges."""
    from msopt import emit
    from msopt.load import load
    from msopt.rules import PartitionOptions, make_plan

    plan, merges = make_plan("none", view, PartitionOptions(streams=streams))
    if not plan:
        return model, plan, merges
    out = Path(workdir) / Path(model.path).name
    emit.write(model, plan, out, placement="device", device_type=device_type)
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
                 priorities=None, intra_op_threads=0, inter_op_threads=0):
        self.tf = tf = import_tensorflow()
        self.device_type, self.config = configure_devices(tf, streams, device, memory_fraction, allow_growth, priorities)
        self.config.intra_op_parallelism_threads = intra_op_threads  # 0: TensorFlow's choice (all cores)
        self.config.inter_op_parallelism_threads = inter_op_threads
        self._workdir = tempfile.TemporaryDirectory(prefix="msopt-run-")
        self.model, self.partition, self.merges = place(model, view, streams, self.device_type, self._workdir.name)
        self.view = view
        self.streams = streams
        # TF2 SavedModels run their signature functions eagerly, as a plain TensorFlow loop does.
        self.executable = Executable(self.model, streams, self.device_type, session_config=self.config, eager=True)
        self.specs = self.executable.specs
        self._session = None

    @property
    def session_executable(self):
        """The model in a v1 Session (TF2 too: functions inlined), for step statistics and cutting at tensors."""
        if getattr(self.executable, "session", None) is not None:
            return self.executable
        if self._session is None:
            self._session = Executable(self.model, self.streams, self.device_type, session_config=self.config)
        return self._session

    def load_other(self, model):
        """Another model (e.g. the unpartitioned original) with the same device configuration."""
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
        self.executable.close()
        if self._session is not None:
            self._session.close()
        self._workdir.cleanup()
