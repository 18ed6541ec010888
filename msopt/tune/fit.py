"""The host model fitted to the measured candidates: the host constants under which the simulator best explains the
measured times of the plans, written as a host profile (the file ``--host-profile`` reads)."""

from __future__ import annotations

import copy
import itertools
import math
import os
from dataclasses import replace

# The constants fitted and their bounds (µs, or a share for launch_contention); the others stay the target's.
BOUNDS = {"op_overhead_us": (0.0, 1000.0), "partition_overhead_us": (0.0, 10_000.0), "launch_contention": (0.0, 1.0)}
GRID = {
    "op_overhead_us": (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0),
    "partition_overhead_us": (0.0, 20.0, 50.0, 150.0, 500.0, 1500.0, 5000.0),
    "launch_contention": (0.0, 0.25, 0.5, 1.0),
}
CPU_COMMENT = (
    "fitted by msopt tune from plans measured on logical CPU devices: these figures describe this CPU host "
    "(TensorFlow's executor on {cores} shared cores), not a GPU and its driver; use them to simulate this host only"
)


def fit_host(view, cost_model, points):
    """Fit ``points`` ([(candidate, measured median ms)]); returns the fit's report (values, residual, errors).

    The residual is the root mean square of log(measured / simulated) over the points; the simulator's error
    is the mean of |simulated − measured| / measured, before (the target's constants) and after the fit.
    Without a multi-stream point only ``op_overhead_us`` is fitted (the others leave no trace in the times).
    """
    from scipy.optimize import minimize

    from msopt.simulator.simulate import simulate

    names = ["op_overhead_us"]
    if any(c.streams_used > 1 for c, _ in points):
        names += ["partition_overhead_us", "launch_contention"]
    base = cost_model.target
    # TensorFlow's inter-op pool defaults to the host's logical CPUs; at least the widest plan's streams, because
    # msopt.simulator.simulate can loop forever when fewer pool threads than streams meet a large op overhead.
    threads = max(os.cpu_count() or 1, max(c.streams for c, _ in points))
    memo = {}

    def predict(values):
        key = tuple(round(v, 6) for v in values)
        if key not in memo:
            model = copy.copy(cost_model)
            model.target = replace(base, launch_threads=threads, **dict(zip(names, key)))
            memo[key] = [float(simulate(view, c.partition, c.streams, model).makespan_us) / 1000 for c, _ in points]
        return memo[key]

    def loss(values):
        return math.sqrt(
            sum(math.log(m / max(s, 1e-9)) ** 2 for s, (_, m) in zip(predict(values), points)) / len(points)
        )

    start = min(itertools.product(*(GRID[n] for n in names)), key=loss)
    found = minimize(loss, start, method="Powell", bounds=[BOUNDS[n] for n in names], options={"maxfev": 200})
    best = min((tuple(float(v) for v in found.x), tuple(start)), key=loss)
    before = [simulate(view, c.partition, c.streams, cost_model).makespan_us / 1000 for c, _ in points]
    after = predict(best)
    return {
        "fitted": {n: round(float(v), 4) for n, v in zip(names, best)},
        "kept": {"launch_us": base.launch_us, "sync_us": base.sync_us, "copy_latency_us": base.copy_latency_us},
        "launch_threads": threads,
        "points": len(points),
        "residual_rms_log": round(loss(best), 4),
        "error_before": _error(before, points),
        "error_after": _error(after, points),
        "per_candidate": [
            {"label": c.label, "measured_ms": m, "simulated_before_ms": round(b, 4), "simulated_after_ms": round(a, 4)}
            for (c, m), b, a in zip(points, before, after)
        ],
    }


def _error(simulated, points):
    """Mean relative error |simulated − measured| / measured."""
    return round(sum(abs(s - m) / m for s, (_, m) in zip(simulated, points)) / len(points), 4)


def host_profile(fit, device_type):
    """The host profile document of ``fit``: the fitted values, launch_threads, and where they come from."""
    doc = {**fit["fitted"], "launch_threads": fit["launch_threads"]}
    doc["source"] = (
        f"msopt tune: fitted to {fit['points']} measured plan(s), residual {fit['residual_rms_log']} (rms of "
        f"log measured/simulated); simulator error {fit['error_before']} before, {fit['error_after']} after"
    )
    if device_type == "cpu":
        doc["comment"] = CPU_COMMENT.format(cores=fit["launch_threads"])
    return doc
