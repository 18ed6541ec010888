"""Streams become devices: virtual GPUs or logical CPU devices, configured by one function for msopt run and --verify."""

import contextlib
import os

from msopt.errors import InputError
from msopt.runner.tensorflow_runtime import error_line

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
            raise InputError(
                f"--stream-priority: priority {value} is outside CUDA's range "
                f"[{GREATEST_PRIORITY}, {LEAST_PRIORITY}] ({GREATEST_PRIORITY} runs first, "
                f"{LEAST_PRIORITY} is the default)"
            )
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


def configure_devices(
    tf,
    streams,
    device="auto",
    memory_fraction=None,
    allow_growth=False,
    priorities=None,
    replicas=1,
    merge_copy_streams=False,
):
    """Make ``streams`` logical devices and return (device type, Session ConfigProto) built from them.

    The one device configuration of msopt run and of --verify: virtual GPUs on a GPU, logical CPU
    devices on the CPU. TF2 functions run on the devices of TensorFlow's context, which takes them
    once per process, when it starts; a v1 Session makes its own from the ConfigProto's counts.
    ``merge_copy_streams`` sets GPUOptions.Experimental.stream_merge_options (TF >= 2.13): host-to-device,
    device-to-host and device-to-device copies run on the compute stream; it has no effect on the CPU.
    ``replicas``: processes sharing each GPU (``--replicas``); the default memory share is divided by it.
    With several GPUs the streams are spread by msopt.runner.gpu_layout's rule; ``gpu_layout(tf, streams)``
    gives the same layout afterwards.
    """
    from tensorflow.python.eager import context

    gpus = tf.config.list_physical_devices("GPU")
    device = ("gpu" if gpus else "cpu") if device == "auto" else device
    if device == "gpu":
        if not gpus:
            raise InputError(
                "--device gpu: TensorFlow sees no GPU (is tensorflow[and-cuda] installed, "
                "is CUDA_VISIBLE_DEVICES or --gpus hiding it?)"
            )
        if allow_growth:
            request_allow_growth()
        _configure_gpus(tf, gpus, streams, memory_fraction, priorities, replicas)
        with tensorflow_errors("create its devices"):
            context.context().ensure_initialized()
    else:
        if memory_fraction is not None or priorities is not None:
            raise InputError("--gpu-memory-fraction and --stream-priority apply to GPUs only (--device cpu)")
        hide_gpus(tf)  # unassigned ops and --compare-to models must not land on a GPU the partition avoids
        _configure_cpus(tf, streams)
    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(context.context().config)
    config.allow_soft_placement = device == "gpu"  # ops without a GPU kernel (strings, hashing) stay on the CPU
    if device == "cpu":
        config.device_count["GPU"] = 0
        config.device_count["CPU"] = streams
    else:
        if allow_growth:
            config.gpu_options.allow_growth = True
        if merge_copy_streams:
            merge_copy_streams_into(config)
    return device, config


def merge_copy_streams_into(config):
    """Ask TensorFlow to run a GPU's copies on its compute stream (GPUOptions.Experimental.stream_merge_options)."""
    merge = config.gpu_options.experimental.stream_merge_options
    merge.merge_host_to_device_stream = True
    merge.merge_device_to_host_stream = True
    merge.merge_device_to_device_stream = True
    return config


def logical_devices(tf, device_type):
    """The logical devices of ``device_type`` TensorFlow's context has (starting it)."""
    return len(tf.config.list_logical_devices(device_type.upper()))


def _configure_cpus(tf, streams):
    """``streams`` logical CPU devices in TensorFlow's context, unless it started already (then it keeps its own)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(streams)]
        )
    except RuntimeError:  # started: Sessions still get ``streams`` devices from the ConfigProto
        pass


def bitwise_gpu_numerics(tf):
    """What a bitwise --compare-to on a GPU needs, set before the first step runs; returned for the report.

    TF_CUDNN_USE_AUTOTUNE=0 must already be in the environment (msopt run sets it before TensorFlow starts)."""
    tf.config.experimental.enable_tensor_float_32_execution(False)  # TF32 rounds float32 matmuls/convolutions
    tf.config.experimental.enable_op_determinism()  # no atomics-based reductions; may refuse some ops
    return {
        "tensor_float_32": False,
        "op_determinism": True,
        "cudnn_autotune": os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1") != "0",
        "note": "TF32 off, op determinism on and cuDNN autotuning off for the comparison: "
        "the measured latency is that of this deterministic configuration",
    }


def gpu_layout(tf, streams):
    """The msopt.runner.gpu_layout.GpuLayout of ``streams`` over the GPUs TensorFlow sees, with their UUIDs when known."""
    from msopt.runner.gpu_inventory import visible_gpus
    from msopt.runner.gpu_layout import GpuLayout

    count = len(tf.config.get_visible_devices("GPU"))
    known = visible_gpus()
    return GpuLayout(streams, count, [g.uuid for g in known[:count]] if len(known) >= count else None)


def _configure_gpus(tf, gpus, streams, memory_fraction, priorities, replicas):
    if streams == 1 and memory_fraction is None and priorities is None and replicas == 1:
        return  # one stream in one process: each GPU whole (growing on demand with --allow-growth)
    from msopt.runner.gpu_inventory import memory_mb

    plan = virtual_devices(memory_mb(len(gpus)), streams, memory_fraction, replicas, priorities)
    try:
        for gpu, devices in zip(gpus, plan):
            tf.config.set_logical_device_configuration(
                gpu,
                [
                    tf.config.LogicalDeviceConfiguration(memory_limit=limit, experimental_priority=priority)
                    for limit, priority in devices
                ],
            )
    except RuntimeError:  # the context started already (a second configuration in one process, e.g. tune's lanes)
        have = len(tf.config.list_logical_devices("GPU"))
        if have < streams:
            raise InputError(
                f"TensorFlow's GPU context already started with {have} virtual GPUs; {streams} are needed"
            ) from None


def virtual_devices(totals, streams, memory_fraction=None, replicas=1, priorities=None):
    """Per GPU (``totals``: its MB), the (memory limit MB, priority) of each virtual device, in TensorFlow's order.

    Each GPU's share (``memory_fraction``, default 0.9 / ``replicas``, as every replica uses every
    GPU) is split evenly among its ceil(streams / G) devices; stream k is GPU k mod G's device
    k // G (msopt.runner.gpu_layout). A padding device (no stream) gets the least priority.
    """
    from msopt.runner.gpu_layout import GpuLayout

    layout = GpuLayout(streams, len(totals))
    fraction = DEFAULT_GPU_MEMORY_FRACTION / replicas if memory_fraction is None else memory_fraction
    plan = []
    for g, total in enumerate(totals):
        limit = max(1, int(total * fraction / layout.per_gpu))
        plan.append(
            [
                (limit, None if priorities is None else LEAST_PRIORITY if k is None else priorities[k])
                for k in layout.streams_on(g)
            ]
        )
    return plan
