"""Random task graphs as cost models (no model behind them): the simulator's inputs drawn at random, and hosts."""

import random

from msopt.graph.flat import Tasks
from msopt.simulator.cost import CostModel, Target

SHARES = (1 / 80, 0.25, 0.5, 1.0)


def random_target(rng):
    """A GPU whose host settings are drawn from the ranges the simulator handles."""
    return Target(
        "random",
        "random host",
        sms=80,
        fp32_tflops=10.0,
        gemm_tflops=10.0,
        fp16_tflops=10.0,
        memory_gbs=rng.choice((2.0, 900.0, 1555.0)),
        launch_us=rng.choice((0.0, 3.0, 4.0, 2.5)),
        launch_threads=rng.randint(1, 4),
        sync_us=rng.choice((0.0, 5.0, 10.0)),
        copy_latency_us=rng.choice((0.0, 2.0, 5.0)),
        op_overhead_us=rng.choice((0.0, 0.0, 0.6, 1.2)),
        partition_overhead_us=rng.choice((0.0, 20.0, 50.0)),
        launch_contention=rng.choice((0.0, 0.25, 0.5, 1.0)),
        copy_streams=rng.choice((0, 1, 2)),
        merge_copy_streams=rng.random() < 0.3,
    )


def random_cost_model(seed, size=None, target=None, layer_width=None):
    """A cost model over a random DAG: ``size`` tasks in layers (random widths), data edges from earlier layers on
    random output ports (some past the outputs the producer has), control edges, duplicate edges; kernels, pass-through
    ops and ops read in place mixed; durations on a coarse grid so that events tie."""
    rng = random.Random(seed)
    n = size if size is not None else rng.randint(1, 150)
    width = layer_width or rng.randint(1, 16)
    t = Tasks()
    kernel, neutral, duration, share, out_bytes = [], [], [], [], []
    p_kernel, p_neutral = rng.choice((0.0, 0.5, 0.8, 1.0)), rng.choice((0.0, 0.1, 0.3))
    for i in range(n):
        layer = i // width
        t.key.append(f"n{i}")
        t.instance.append(0)
        inputs, control = [], []
        if layer > 0:
            for _ in range(rng.choice((1, 1, 2, 3))):
                back = 1 if layer < 2 or rng.random() < 0.8 else rng.randint(2, min(6, layer))
                src = (layer - back) * width + rng.randrange(width)
                inputs.append((src, rng.choice((0, 0, 0, 1, 2))))
            if rng.random() < 0.15:
                control.append(rng.randrange(layer * width))
        t.inputs.append(inputs)
        t.control.append(control)
        k = rng.random() < p_kernel
        t.op.append("Relu" if k else rng.choice(("Identity", "Const")))
        kernel.append(k)
        neutral.append(rng.random() < p_neutral)
        duration.append(rng.choice((1.0, 2.0, 2.5, 5.0, 10.0, rng.uniform(0.5, 40.0))) if k else 0.0)
        share.append(rng.choice(SHARES) if k else 0.0)
        out_bytes.append([rng.choice((0, 4, 4096, 1 << 20)) for _ in range(rng.choice((0, 1, 1, 2)))])
    return cost_model_of(t, kernel, neutral, duration, share, out_bytes, target or random_target(rng))


def layered_cost_model(size, width=64, seed=0, target=None):
    """A big layered DAG of kernels (1 to 3 inputs from the previous layers, now and then a constant read in
    place), for measuring: the shape of bench/partition_scale.py's graphs."""
    rng = random.Random(seed)
    t = Tasks()
    t.key = [f"n{i}" for i in range(size)]
    t.instance = [0] * size
    t.control = [[] for _ in range(size)]
    kernel, neutral = [True] * size, [False] * size
    for i in range(size):
        layer = i // width
        if layer == 0:
            t.inputs.append([])
            kernel[i], neutral[i] = False, True
            continue
        ins = set()
        for _ in range(rng.choice((1, 2, 2, 3))):
            back = 1 if layer < 2 or rng.random() < 0.9 else rng.randint(2, min(8, layer))
            ins.add((layer - back) * width + rng.randrange(width))
        t.inputs.append([(j, 0) for j in sorted(ins)])
    t.op = ["Relu" if k else "Placeholder" for k in kernel]
    duration = [rng.uniform(2.0, 30.0) if k else 0.0 for k in kernel]
    share = [rng.choice(SHARES) if k else 0.0 for k in kernel]
    out_bytes = [[rng.choice((4096, 65536, 1 << 20))] for _ in range(size)]
    from msopt.simulator.cost import TARGETS

    return cost_model_of(t, kernel, neutral, duration, share, out_bytes, target or TARGETS["v100"])


def cost_model_of(tasks, kernel, neutral, duration, share, out_bytes, target):
    """A CostModel holding these per-task figures, as CostModel's own constructor leaves them."""
    cm = CostModel.__new__(CostModel)
    cm.view, cm.target, cm.batch_size, cm.host_ranges, cm.signature = None, target, 1, None, None
    cm.tasks, cm.shapes, cm.flops = tasks, None, [0.0] * len(kernel)
    cm.kernel, cm.neutral, cm.duration, cm.share, cm.out_bytes = kernel, neutral, duration, share, out_bytes
    cm.unknown_shapes = cm.measured = 0
    cm._bound = cm._single = cm._succ = cm._preds = None
    return cm


def random_streams(cm, streams, seed):
    """Each task on a random stream of ``streams`` (sometimes leaving some unused, sometimes runs of one)."""
    rng = random.Random(seed)
    used = rng.sample(range(streams), rng.randint(1, streams))
    if rng.random() < 0.3:  # runs of consecutive tasks on one stream (as real plans look)
        out, s = [], used[0]
        for _ in range(len(cm)):
            if rng.random() < 0.2:
                s = rng.choice(used)
            out.append(s)
        return out
    return [rng.choice(used) for _ in range(len(cm))]
