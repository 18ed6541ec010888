"""Simulated figures over the uncertain host constants: the corners of their box, the ranges, robustness.

The host constants TensorFlow's launch path depends on (driver contention, launch and per-op
costs, the copy engine) are not known to better than a range (msopt.simulator.host_model.RANGES, derived in
docs/reference.md). A plan is judged at every corner of that box (2 ** 3 simulations over one
cost model: the tasks and kernel times do not change, only the host), each corner against the
one-stream run at the same corner. A plan is robust when it is at least as fast as one stream at
every corner.
"""

from msopt.compiled.side_by_side import ahead
from msopt.simulator.host_model import corners, ranges_for
from msopt.simulator.simulate import check_streams, simulate_streams, streams_of

TOLERANCE = 1e-9  # a plan equal to one stream is robust


def corner_models(cost_model):
    """The cost model under each corner's host constants (built once per cost model)."""
    cached = getattr(cost_model, "_corner_models", None)
    if cached is None:
        ranges = getattr(cost_model, "host_ranges", None) or ranges_for(None)
        cached = [cost_model.with_target(t) for t in corners(cost_model.target, ranges)]
        cost_model._corner_models = cached
    return cached


def corner_figures(view, partition, streams, cost_model):
    """[(makespan_us, single_stream_us)] of ``partition`` at every corner of the box."""
    return corner_figures_of(cost_model, streams_of(cost_model, partition), streams)


def corner_figures_of(cost_model, stream_of, streams):
    """``corner_figures`` with each task's stream given (msopt.simulator.simulate.simulate_streams)."""
    return list(corner_rows(cost_model, stream_of, streams))


def corner_rows(cost_model, stream_of, streams, order=None):
    """(makespan_us, single_stream_us) at each corner in turn (in ``order``, corner indices, if given), each
    simulated when asked for."""
    models = corner_models(cost_model)
    if order is not None:
        models = [models[i] for i in order]
    stream_array = check_streams(cost_model.tasks.key, stream_of, streams)

    def row(cm):
        return simulate_streams(cm, stream_array, streams, waits=False).makespan_us, cm.single_stream_us()

    return ahead(row, models, len(cost_model))  # a corner or two run ahead of the one asked for (side_by_side)


def speedups(rows):
    return [single / makespan if makespan > 0 else 1.0 for makespan, single in rows]


def is_robust(rows):
    return min(speedups(rows), default=1.0) >= 1.0 - TOLERANCE


def ranges(view, partition, streams, cost_model, point=None):
    """{speedup_range, makespan_ms_range, single_stream_ms_range, robust} over the corners and the point."""
    rows = corner_figures(view, partition, streams, cost_model)
    if point is not None:
        rows.append((point.makespan_us, cost_model.single_stream_us()))
    ups = speedups(rows)
    ms = lambda us: round(us / 1000.0, 6)  # noqa: E731
    return {
        "speedup_range": [round(min(ups), 4), round(max(ups), 4)],
        "makespan_ms_range": [ms(min(r[0] for r in rows)), ms(max(r[0] for r in rows))],
        "single_stream_ms_range": [ms(min(r[1] for r in rows)), ms(max(r[1] for r in rows))],
        "robust": is_robust(rows),
        "host_corners": len(rows) - (point is not None),
    }


def describe(speedup, speedup_range):
    """`simulated 1.31x (1.04x-1.62x over the host assumptions)`."""
    lo, hi = speedup_range
    return f"simulated {speedup:.3g}x ({lo:.3g}x-{hi:.3g}x over the host assumptions)"


__all__ = [
    "corner_models",
    "corner_figures",
    "corner_figures_of",
    "corner_rows",
    "describe",
    "is_robust",
    "ranges",
    "speedups",
]
