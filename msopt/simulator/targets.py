"""The GPU profiles a cost model targets: vendor peak figures per GPU, and the default target."""

from dataclasses import dataclass, replace


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
    # The host model (msopt.simulator.host_model gives the product's targets their values and sources). The
    # defaults here are a neutral machine for hand-built tests: no per-op overhead, no contention.
    launch_us: float = 4.0  # CUDA driver call that enqueues one kernel, on the launching thread
    launch_threads: int = 1  # inter-op pool size: at most this many stream executors run at once
    sync_us: float = 10.0  # cross-stream event: record, wait, and the host learning of completion
    copy_latency_us: float = 5.0  # fixed cost of one device-to-device memcpy
    threads_per_sm: int = 2048  # resident threads per SM (CUDA occupancy limit: 2048 Volta/Ampere/Hopper, 1024 Turing)
    op_overhead_us: float = 0.0  # TensorFlow executor bookkeeping per op, on the launching thread
    partition_overhead_us: float = 0.0  # per run, per stream beyond the first: its executor starts that much later
    launch_contention: float = 0.0  # share of a launch serialized across threads by the driver (0..1)
    copy_streams: int = 0  # device-to-device copy streams per stream (0: copies never queue)
    merge_copy_streams: bool = False  # copies run on the producer's compute stream (stream_merge_options)

    @property
    def copy_gbs(self):
        """A device-to-device copy reads and writes every byte: half the DRAM bandwidth."""
        return self.memory_gbs / 2


def _with_host(target):
    from msopt.simulator.host_model import host_defaults

    return replace(target, **host_defaults(target.name))


# Vendor data sheets: NVIDIA V100 (SXM2), A100 (SXM4 80GB), H100 (SXM5), T4 (PCIe 70W).
# SM counts from the architecture whitepapers (Volta GV100, Ampere GA100, Hopper GH100, Turing TU104).
_VENDOR = {
    "h100": Target(
        "h100",
        "NVIDIA H100 SXM5 80GB",
        sms=132,
        fp32_tflops=67.0,
        gemm_tflops=494.5,
        fp16_tflops=989.5,
        memory_gbs=3350.0,
    ),
    "a100": Target(
        "a100",
        "NVIDIA A100 SXM4 80GB",
        sms=108,
        fp32_tflops=19.5,
        gemm_tflops=156.0,
        fp16_tflops=312.0,
        memory_gbs=2039.0,
    ),
    "v100": Target(
        "v100", "NVIDIA V100 SXM2 16GB", sms=80, fp32_tflops=15.7, gemm_tflops=15.7, fp16_tflops=125.0, memory_gbs=900.0
    ),
    "t4": Target(
        "t4",
        "NVIDIA T4 PCIe 16GB",
        sms=40,
        fp32_tflops=8.1,
        gemm_tflops=8.1,
        fp16_tflops=65.0,
        memory_gbs=320.0,
        threads_per_sm=1024,
    ),
}
TARGETS = {name: _with_host(target) for name, target in _VENDOR.items()}
DEFAULT_TARGET = "h100"  # the current data-centre GPU
