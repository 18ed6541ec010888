"""The GPU profiles a cost model targets: vendor peak figures per GPU, and the default target."""

from dataclasses import dataclass


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
DEFAULT_TARGET = "h100"  # the current data-centre GPU
