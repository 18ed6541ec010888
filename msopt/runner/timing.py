"""The timing loop: steps run warm-up then measured, and the latency and throughput figures over them."""

import sys
import time

import click
import numpy as np

from msopt.runner.latency import latency_table


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


def timed_steps(steps, iterations, warmup, barrier=None):
    """``measure`` with a progress bar when a person watches; a replica worker (``barrier``) warms up, then waits
    at the start barrier so that every replica measures at once."""
    from msopt.runner.replicas import wait_for_start

    bar = None
    try:
        if sys.stderr.isatty() and not barrier:
            bar = click.progressbar(length=iterations, label="msopt: measuring", file=sys.stderr)
            bar.__enter__()
        measure(steps, 0, warmup)
        if barrier:
            wait_for_start(barrier)
        every = max(1, iterations // 100)
        tick = (lambda i: bar.update(every) if (i + 1) % every == 0 else None) if bar else None
        return measure(steps, iterations, 0, tick)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


def latency_summary(latencies, wall, batch_size):
    ms = np.asarray(latencies) * 1e3
    steps = len(latencies)
    return {
        "steps": steps,
        "batch_size": batch_size,
        "latency_ms": latency_table(ms),
        "throughput": {"steps_per_s": _r(steps / wall), "records_per_s": _r(steps * batch_size / wall)},
        "wall_s": _r(wall),
    }


def _r(x):
    return round(float(x), 4)
