"""Kernel costs: an op's FLOPs and bytes, and its roofline time and GPU share on a target.

full_gpu_us = max(flops / (peak * COMPUTE_EFFICIENCY), bytes / (bandwidth * MEMORY_EFFICIENCY))
share       = clamp(threads / (sms * threads_per_sm), 1 / sms, 1)   threads = outputs / outputs per thread
standalone  = max(MIN_KERNEL_US, full_gpu_us / share)
"""

import math

import numpy as np

from msopt.simulator.shapes import flag

# Modelling constants (assumptions, not vendor figures; see the README's calibration section).
COMPUTE_EFFICIENCY = 0.7  # fraction of peak FLOP/s a tuned cuDNN/cuBLAS kernel reaches when it fills the GPU
MEMORY_EFFICIENCY = 0.8  # fraction of DRAM bandwidth a streaming kernel reaches (typical of STREAM-like copies)
MIN_KERNEL_US = 2.0  # shortest kernel execution on the device, launch already paid on the host
GEMM_OUTPUTS_PER_THREAD = 1.3  # outputs per thread of a Conv/MatMul kernel: fitted to Inception-v3's 6.51 ms (README)
MAX_BATCH_SIZE = 2**31 - 1  # larger batches overflow the figures, and no GPU holds them
# Shapes read from a model are plausible (msopt.graph.protos.implausible_dims), but products of them (a MatMul of
# [2^40, 1] by [1, 2^40], a large batch times a large sample) need not be: a count is capped here, so that a
# tensor's bytes (16 bytes an element at most) stay far inside the int64 the simulator keeps them in.
MAX_COUNTED_ELEMENTS = 2**50
ELEMENTWISE_OUTPUTS_PER_THREAD = 4  # outputs per thread of elementwise/reduction kernels (Eigen vectorizes by 4)

DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "int32": 4,
    "uint8": 1,
    "int16": 2,
    "int8": 1,
    "string": 16,
    "complex64": 8,
    "int64": 8,
    "bool": 1,
    "qint8": 1,
    "quint8": 1,
    "qint32": 4,
    "bfloat16": 2,
    "qint16": 2,
    "quint16": 2,
    "uint16": 2,
    "complex128": 16,
    "half": 2,
    "resource": 0,
    "variant": 0,
    "uint32": 4,
    "uint64": 8,
}

GEMM_OPS = {
    "Conv2D",
    "Conv3D",
    "MatMul",
    "BatchMatMul",
    "BatchMatMulV2",
    "BatchMatMulV3",
    "DepthwiseConv2dNative",
    "_FusedConv2D",
    "_FusedMatMul",
    "Conv2DBackpropInput",
    "Einsum",
}
GATHER_OPS = {
    "Gather",
    "GatherV2",
    "ResourceGather",
    "GatherNd",
    "ResourceGatherNd",
    "SparseSegmentSum",
    "SparseSegmentMean",
    "SparseSegmentSqrtN",
    "EmbeddingLookup",
    "UnsortedSegmentSum",
}


# Ops whose FLOPs or bytes read their inputs' shapes or their attributes (``flops_bytes`` one by one);
# every other kernel is max(outputs, inputs) FLOPs (5 per output for FusedBatchNorm) over its bytes.
SHAPE_DEPENDENT_OPS = (
    frozenset({"Conv2D", "_FusedConv2D", "Conv2DBackpropInput", "DepthwiseConv2dNative", "MaxPool", "AvgPool"})
    | frozenset({"MatMul", "_FusedMatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
    | GATHER_OPS
)


def elements(shape, batch_size):
    """Element count, the unknown leading dimension as the batch and other unknown dimensions as 1, at most
    MAX_COUNTED_ELEMENTS."""
    if shape is None:
        return batch_size
    n = 1
    for k, d in enumerate(shape):
        n *= d if d is not None and d >= 0 else (batch_size if k == 0 else 1)
    return n if n <= MAX_COUNTED_ELEMENTS else MAX_COUNTED_ELEMENTS


def tensor_bytes(dtype, shape, batch_size):
    return elements(shape, batch_size) * DTYPE_BYTES.get(dtype, 4)


def flops_bytes(op, proto, ins, in_elems, in_bytes, out_elems, out_bytes, batch_size):
    """(floating-point operations, bytes read and written) of one op; resource and variant inputs count 0 bytes."""
    w = ins[1][1] if len(ins) > 1 else None
    if op in ("Conv2D", "_FusedConv2D", "Conv2DBackpropInput") and w and len(w) == 4:
        return 2.0 * out_elems * w[0] * w[1] * w[2], in_bytes + out_bytes
    if op == "DepthwiseConv2dNative" and w and len(w) == 4:
        return 2.0 * out_elems * w[0] * w[1], in_bytes + out_bytes
    if op in ("MatMul", "_FusedMatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3") and ins and ins[0][1]:
        a = ins[0][1]
        k = a[-2] if op in ("MatMul", "_FusedMatMul") and flag(proto.attr, "transpose_a") and len(a) > 1 else a[-1]
        return 2.0 * out_elems * max(k if k and k > 0 else 1, 1), in_bytes + out_bytes
    if op in ("MaxPool", "AvgPool"):
        window = list(proto.attr["ksize"].list.i) if "ksize" in proto.attr else []
        window = window if len(window) == 4 else [1, 3, 3, 1]  # TensorFlow refuses other lengths
        return out_elems * float(math.prod(window)), in_bytes + out_bytes
    if op in GATHER_OPS:  # reads only the rows it gathers
        index_bytes = tensor_bytes(*ins[1], batch_size) if len(ins) > 1 else 0
        return 0.0, 2 * out_bytes + index_bytes
    if op.startswith("FusedBatchNorm"):
        return 5.0 * out_elems, in_bytes + out_bytes
    return float(max(out_elems, in_elems)), in_bytes + out_bytes


def roofline(gemm, half, flops, bytes_moved, out_elems, target):
    """(GPU share, standalone microseconds) arrays of kernels on ``target`` (see the module docstring).

    ``gemm`` and ``half`` are boolean arrays (a Conv/MatMul kernel, its output half or bfloat16);
    ``flops`` is float64, ``bytes_moved`` and ``out_elems`` exact integers (int64, or Python ints in
    an object array when they may not fit), so every figure is the one the scalar formula gives.
    """
    fp32 = target.fp32_tflops * 1e6 * COMPUTE_EFFICIENCY
    compute = np.where(gemm, np.where(half, target.fp16_tflops, target.gemm_tflops) * 1e6 * COMPUTE_EFFICIENCY, fp32)
    full_us = np.maximum(flops / compute, bytes_moved / (target.memory_gbs * 1e3 * MEMORY_EFFICIENCY))
    threads = np.where(gemm, out_elems / GEMM_OUTPUTS_PER_THREAD, out_elems / ELEMENTWISE_OUTPUTS_PER_THREAD)
    threads = np.maximum(1.0, threads.astype(np.float64))
    share = np.minimum(1.0, np.maximum(1.0 / target.sms, threads / (target.sms * target.threads_per_sm)))
    return share, np.maximum(MIN_KERNEL_US, full_us.astype(np.float64) / share)
