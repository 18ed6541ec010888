"""Reference cost model: shape inference and the per-op pass one task at a time, as before the array version.

Kept out of the package: tests compare msopt.simulator.cost.CostModel with ``reference(...)`` figure for figure.
"""

import math

from reference_flat import flat_run

from msopt.graph.op_tables import NEUTRAL_OPS, NO_KERNEL_OPS
from msopt.graph.view import MAIN
from msopt.simulator.cost import load_costs
from msopt.simulator.kernels import (
    COMPUTE_EFFICIENCY,
    DTYPE_BYTES,
    ELEMENTWISE_OUTPUTS_PER_THREAD,
    GATHER_OPS,
    GEMM_OPS,
    GEMM_OUTPUTS_PER_THREAD,
    MEMORY_EFFICIENCY,
    MIN_KERNEL_US,
)
from msopt.simulator.shapes import _output_dtypes, _propagate, _recorded_shapes, flag
from msopt.simulator.targets import DEFAULT_TARGET, TARGETS


class Reference:
    """What CostModel computed, per task, with the per-op code of before."""

    def __init__(self, view, model=None, target=DEFAULT_TARGET, batch_size=1, costs=None, signature=None):
        target = TARGETS[target] if isinstance(target, str) else target
        self.view, self.target, self.batch_size = view, target, batch_size
        self.signature, self.tasks, feeds = flat_run(view, model, signature)
        t = self.tasks
        n = len(t.key)
        self.shapes = infer_shapes(view, t, feeds)
        measured = load_costs(costs) if isinstance(costs, str) else (costs or {})
        self.duration = [0.0] * n
        self.share = [0.0] * n
        self.kernel = [False] * n
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

    def _cost(self, i, measured):
        t, target = self.tasks, self.target
        op, key = t.op[i], t.key[i]
        if op in NO_KERNEL_OPS:
            if key in measured and measured[key] > 0:
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

    def successors(self):
        """Per task, [(consumer task, output index or -1 for a control edge)], and per task its edge count."""
        t = self.tasks
        succ = [[] for _ in t.key]
        count = [0] * len(t.key)
        for j in range(len(t.key)):
            for i, port in t.inputs[j]:
                succ[i].append((j, port))
            for i in t.control[j]:
                succ[i].append((j, -1))
            count[j] = len(t.inputs[j]) + len(t.control[j])
        return succ, count


def infer_shapes(view, t, feeds):
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
            if len(dtypes) < len(recorded):
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


def elements(shape, batch_size):
    if shape is None:
        return batch_size
    n = 1
    for k, d in enumerate(shape):
        n *= d if d is not None and d >= 0 else (batch_size if k == 0 else 1)
    return n


def tensor_bytes(dtype, shape, batch_size):
    return elements(shape, batch_size) * DTYPE_BYTES.get(dtype, 4)


def flops_bytes(op, proto, ins, in_elems, in_bytes, out_elems, out_bytes, batch_size):
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
        window = window if len(window) == 4 else [1, 3, 3, 1]
        return out_elems * float(math.prod(window)), in_bytes + out_bytes
    if op in GATHER_OPS:
        index_bytes = tensor_bytes(*ins[1], batch_size) if len(ins) > 1 else 0
        return 0.0, 2 * out_bytes + index_bytes
    if op.startswith("FusedBatchNorm"):
        return 5.0 * out_elems, in_bytes + out_bytes
    return float(max(out_elems, in_elems)), in_bytes + out_bytes


def roofline(op, dtype, flops, bytes_moved, out_elems, target):
    if op in GEMM_OPS:
        peak = target.fp16_tflops if dtype in ("half", "bfloat16") else target.gemm_tflops
        per_thread = GEMM_OUTPUTS_PER_THREAD
    else:
        peak = target.fp32_tflops
        per_thread = ELEMENTWISE_OUTPUTS_PER_THREAD
    full_us = max(
        flops / (peak * 1e6 * COMPUTE_EFFICIENCY), bytes_moved / (target.memory_gbs * 1e3 * MEMORY_EFFICIENCY)
    )
    threads = max(1.0, out_elems / per_thread)
    share = min(1.0, max(1.0 / target.sms, threads / (target.sms * target.threads_per_sm)))
    return share, max(MIN_KERNEL_US, full_us / share)
