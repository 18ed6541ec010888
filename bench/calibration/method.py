"""The one calibration method: a model's best simulated multi-stream plan against one stream, point and host range.

For a figure: build the cost model of its model (target, batch), plan it with the ``auto`` policy
on each stream count, keep the plan with the best point estimate, and report its speedup over one
stream at the point host constants and over the corners of the uncertain host box
(msopt.simulator.uncertainty). A figure is met when the published ratio lies inside the simulated range and
the point is within TOLERANCE of it. Request-level figures (several queries in flight, throughput)
go through msopt.simulator.concurrency instead: closed-loop queries over 1..K lanes (stream groups, one stream
each), the robust best configuration's throughput against one lane, at the point and the corners.
"""

import time
from dataclasses import replace

from msopt.graph.view import GraphView
from msopt.load import load
from msopt.planning.plan import PlanOptions, make_plan
from msopt.simulator.cost import CostModel
from msopt.simulator.simulate import simulate
from msopt.simulator.uncertainty import ranges

TOLERANCE = 0.25
STREAMS = (2, 4, 8)

_loaded = {}


def loaded(name):
    """(model, view) of a calibration model, loaded once."""
    from calibration.models import model_path

    if name not in _loaded:
        model = load(model_path(name))
        _loaded[name] = (model, GraphView(model.graph_def))
    return _loaded[name]


def best_plan(view, model, cm, streams=STREAMS):
    """(result, streams, partition, plan seconds) of the auto plan with the lowest point makespan."""
    best = None
    for n in streams:
        started = time.perf_counter()
        plan = make_plan(view, PlanOptions(streams=n, policy="auto", const_dup=False), model, cm)
        seconds = time.perf_counter() - started
        used = max(plan.partition.values(), default=0) + 1
        result = simulate(view, plan.partition, n, cm)
        if best is None or result.makespan_us < best[0].makespan_us:
            best = (result, n if used > 1 else 1, plan.partition, seconds)
    return best


def calibrate(figure, streams=STREAMS):
    """One table row: the published ratio, the simulated point and range, the gap, met or not."""
    row = {"key": figure.key, "source": figure.source, "published": figure.published, "level": figure.level}
    row["note"] = figure.note
    if figure.ratio is None:
        row["status"] = "not mapped"
        return row
    row.update(model=figure.model, target=figure.target, batch_size=figure.batch_size)
    row["published_ratio"] = round(figure.ratio, 3)
    try:
        model, view = loaded(figure.model)
    except Exception as e:  # noqa: BLE001 - a model that cannot be built is reported, not fatal
        row["status"] = f"cannot build: {e}"
        return row
    cm = CostModel(view, model, target=figure.target, batch_size=figure.batch_size)
    if figure.merge_copy_streams:
        cm = cm.with_target(replace(cm.target, merge_copy_streams=True))
    if figure.level == "request":
        return _request_level(row, figure, cm)
    result, n, partition, seconds = best_plan(view, model, cm, streams)
    single = cm.single_stream_us()
    point = single / result.makespan_us
    spread = ranges(view, partition, result.streams, cm, point=result)
    lo, hi = spread["speedup_range"]
    gap = point / figure.ratio - 1
    inside = lo - 1e-9 <= figure.ratio <= hi + 1e-9
    row.update(
        kernels=sum(cm.kernel),
        single_stream_ms=round(single / 1e3, 3),
        makespan_ms=round(result.makespan_us / 1e3, 3),
        streams=n,
        speedup=round(point, 3),
        speedup_range=[lo, hi],
        makespan_ms_range=spread["makespan_ms_range"],
        robust=spread["robust"],
        gap=round(gap, 3),
        in_range=inside,
        within_tolerance=abs(gap) <= TOLERANCE,
        plan_s=round(seconds, 2),
    )
    row["status"] = "met" if inside and abs(gap) <= TOLERANCE else "missed"
    return row


def _request_level(row, figure, cm):
    """A throughput ratio: the robust best lanes configuration against one lane, ``concurrency`` in flight."""
    from msopt.simulator.concurrency import recommend

    started = time.perf_counter()
    best = recommend(cm, {1: {}}, figure.concurrency, figure.lanes)
    point, (lo, hi) = best["gain"], best["gain_range"]
    gap = point / figure.ratio - 1
    inside = lo - 1e-9 <= figure.ratio <= hi + 1e-9
    row.update(
        kernels=sum(cm.kernel),
        single_stream_ms=round(cm.single_stream_us() / 1e3, 3),
        concurrency=figure.concurrency,
        streams=f"{best['lanes']}x{best['streams_per_lane']}",
        requests_per_s=best["requests_per_s"],
        requests_per_s_range=best["requests_per_s_range"],
        gain_by_lanes={c["lanes"]: [c["gain"], c["gain_range"]] for c in best["candidates"]},
        speedup=round(point, 3),
        speedup_range=[lo, hi],
        robust=best["robust"],
        gap=round(gap, 3),
        in_range=inside,
        within_tolerance=abs(gap) <= TOLERANCE,
        plan_s=round(time.perf_counter() - started, 2),
        status="met" if inside and abs(gap) <= TOLERANCE else "missed",
    )
    return row
