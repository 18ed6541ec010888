"""Several requests in flight on one simulated GPU: closed-loop load over K lanes of N streams, throughput, latency.

``concurrency`` requests are outstanding at all times: the first ones start together, and each
time one completes the next is issued (a closed loop, as ``msopt run --concurrency`` drives
TensorFlow). Request i runs on lane i mod K; a lane is a virtual GPU with the plan's N streams, so
the GPU has K x N streams, shared by every request on the lane in launch order. Each request has
its own executor per stream (TensorFlow runs one executor state per call and device partition, on
the shared inter-op pool), starting ``partition_overhead_us`` apart as a single run's do. Kernels
of every request share the GPU (the simulator's processor sharing), the launches the driver's
context-wide resource (``launch_contention``), the executors the inter-op pool.

One cost model is simulated as a task graph of R copies of the request (R = 4 x concurrency by
default), released by the loop (Requests, which msopt.simulator.event_loop reads as arrays). Throughput is measured in the
steady state: over the completions between the concurrency-th and the (R - concurrency)-th, so
neither the burst of the first requests nor the drain of the last counts; latency (issue to
completion) over the requests issued in that window. Not modelled: host-to-device and
device-to-host copies of the inputs and outputs, the client's own time, batching across requests.

A report simulates at most MAX_SIMULATED_TASKS tasks in all (requests x ops, over every plan, lane count and host
corner); more is refused before anything runs (check_work), with what would fit.
"""

import copy

import numpy as np

from msopt.errors import InputError
from msopt.simulator.simulate import Loop, TaskArrays, check_streams, run_tasks, streams_of, task_arrays

CONCURRENCIES = (1, 2, 4, 8, 16, 32)  # the table's columns
REQUESTS_PER_SLOT = 4  # R = this x concurrency requests per simulated load
# Tasks (requests x ops per request) one report may simulate, over all its loads: at most about a minute of
# simulation on one core, and the largest load (a ninth of it at most: every plan and lane count runs at 9 host
# assumptions) holds about 2.2 million tasks, 260 MB of state.
MAX_SIMULATED_TASKS = 20_000_000
TOLERANCE = 1e-9  # a plan as fast as the baseline at a corner counts as robust there
CLOSE = 0.01  # candidates within 1 % of the best robust throughput count as equal: the fewest lanes x streams wins


class _Copies:
    """R copies of a cost model's tasks as the simulator's arrays (msopt.simulator.task_arrays.TaskArrays; task i of copy r is
    r * n + i)."""

    def __init__(self, cost_model, copies):
        base = task_arrays(cost_model)
        n, edges = len(cost_model), len(base.dst)
        self.target = cost_model.target
        self.copies = copies
        shift = np.repeat(np.arange(copies, dtype=np.int64) * n, edges)
        self.arrays = TaskArrays(
            ptr=np.concatenate([(base.ptr[:-1] + r * edges) for r in range(copies)] + [[copies * edges]]),
            dst=np.tile(base.dst, copies) + shift,
            port=np.tile(base.port, copies),
            nbytes=np.tile(base.nbytes, copies),
            duration=np.tile(base.duration, copies),
            share=np.tile(base.share, copies),
            kernel=np.tile(base.kernel, copies),
            neutral=np.tile(base.neutral, copies),
            sources=base.sources,  # of one request: the loop gates them in each copy
        )

    def on(self, target):
        """The same copies under another host (a corner of the host box)."""
        other = copy.copy(self)
        other.target = target
        return other


class Requests:
    """The closed loop: which executor runs each task, which tasks wait for their request's issue, and, once
    simulated, when each request was issued and finished. ``concurrency`` requests start together; the completion
    of a request's last task issues the next (msopt.simulator.event_loop runs the loop, from ``loop``)."""

    def __init__(self, stream_of, copies, concurrency, streams, partition_overhead_us):
        n = len(stream_of)
        self.n, self.copies, self.concurrency, self.streams = n, copies, concurrency, streams
        base = np.asarray(stream_of, np.int64).reshape(n)
        used = np.flatnonzero(np.bincount(base, minlength=streams))  # ascending
        self.loop = Loop(
            tasks=n,
            executors_per_request=streams,
            executor_of=(np.arange(copies, dtype=np.int64)[:, None] * streams + base[None, :]).reshape(-1),
            executors=copies * streams,
            active=min(concurrency, copies) * len(used),  # executors that may run at once
            concurrency=concurrency,
            rank_streams=used,
            rank_offsets=np.arange(len(used)) * partition_overhead_us,  # a request's executors start apart
        )
        self.issued = [0.0] * copies
        self.finished = [0.0] * copies


def lane_streams(cost_model, partition, streams, lanes):
    """Each task's stream within its lane (validated against ``streams``), for one request."""
    stream_of = streams_of(cost_model, partition)
    check_streams(cost_model.tasks.key, stream_of, streams)
    return stream_of


def load(cost_model, partition, streams, concurrency, lanes, requests=None, copies=None):
    """Simulate ``concurrency`` requests in flight over ``lanes`` lanes of ``streams`` streams -> figures.

    ``partition`` is one request's plan ({node key: stream in [0, streams)}); ``requests`` (default
    REQUESTS_PER_SLOT x concurrency) is how many are simulated; ``copies`` a prebuilt _Copies to reuse.
    Returns {"requests_per_s", "records_per_s", "latency_ms": {"p50", "p95", "p99"}, "requests_simulated"}."""
    if concurrency < 1 or lanes < 1 or streams < 1:
        raise ValueError("concurrency, lanes and streams must be at least 1")
    count = requests or REQUESTS_PER_SLOT * concurrency
    if count < 2 * concurrency + 1:
        raise ValueError(f"simulate at least {2 * concurrency + 1} requests for concurrency {concurrency}")
    base = lane_streams(cost_model, partition, streams, lanes)
    replicas = copies if copies is not None else _Copies(cost_model, count)
    return _figures(closed_loop(replicas, base, streams, concurrency, lanes), cost_model.batch_size)


def closed_loop(replicas, base, streams, concurrency, lanes):
    """The simulated closed loop over ``replicas`` (_Copies) with one request's tasks on ``base``'s streams ->
    Requests, with when each request was issued and finished."""
    count = replicas.copies
    loop = Requests(base, count, concurrency, streams, replicas.target.partition_overhead_us)
    lane = (np.arange(count, dtype=np.int64) % lanes) * streams  # request r runs on lane r mod K
    stream_of = (lane[:, None] + np.asarray(base, np.int64)[None, :]).reshape(-1)
    *_, issued, finished = run_tasks(replicas.arrays, replicas.target, lanes * streams, stream_of, loop=loop.loop)
    loop.issued, loop.finished = issued.tolist(), finished.tolist()
    return loop


def _figures(loop, batch_size):
    count, c = loop.copies, loop.concurrency
    ends = sorted(loop.finished)
    lo, hi = c - 1, count - c - 1  # the steady state: after the first burst, before the drain
    span = ends[hi] - ends[lo]
    every = [f - s for f, s in zip(loop.finished, loop.issued)]
    latencies = sorted(x for x, s in zip(every, loop.issued) if ends[lo] <= s <= ends[hi]) or sorted(every)
    per_s = (hi - lo) * 1e6 / span if span > 0 else 0.0
    return {
        "requests_per_s": round(per_s, 3),
        "records_per_s": round(per_s * batch_size, 3),
        "latency_ms": {f"p{q}": round(_percentile(latencies, q) / 1000.0, 6) for q in (50, 95, 99)},
        "requests_simulated": count,
    }


def _percentile(values, q):
    """The nearest-rank percentile of sorted ``values``."""
    import math

    return values[max(0, min(len(values) - 1, math.ceil(q / 100.0 * len(values)) - 1))]


def lane_counts(concurrency, lanes):
    """The lane counts of 1..``lanes`` to simulate at ``concurrency``: from REQUESTS_PER_SLOT x concurrency lanes on,
    every simulated request has a lane of its own (request r on lane r mod K = r), so more give the same figures."""
    return range(1, min(lanes, REQUESTS_PER_SLOT * concurrency) + 1)


def simulated_tasks(ops, plans, corners, concurrency, lanes, concurrencies):
    """Tasks ``report`` simulates for a model of ``ops`` ops per request: each of ``plans`` plans on each of
    ``lane_counts`` at ``concurrency``, at the point estimate and ``corners`` host corners; then one plan at each
    other concurrency of ``concurrencies`` (the table)."""
    total = plans * len(lane_counts(concurrency, lanes)) * (1 + corners) * REQUESTS_PER_SLOT * concurrency * ops
    for c in concurrencies:
        if c != concurrency:
            total += len(lane_counts(c, lanes)) * REQUESTS_PER_SLOT * c * ops
    return total


def check_work(cost_model, plans, concurrency, lanes):
    """InputError, before anything is simulated, when ``report`` at ``concurrency`` on 1..``lanes`` lanes with
    ``plans`` plans would simulate more than MAX_SIMULATED_TASKS tasks; the message says what fits."""
    from msopt.simulator.uncertainty import corner_models

    ops, corners = len(cost_model), len(corner_models(cost_model))

    def work(c, k):
        return simulated_tasks(ops, plans, corners, c, k, set(CONCURRENCIES) | {c})

    total = work(concurrency, lanes)
    if total <= MAX_SIMULATED_TASKS:
        return
    fewer_lanes = max((k for k in range(1, lanes) if work(concurrency, k) <= MAX_SIMULATED_TASKS), default=None)
    lower = max((c for c in range(1, concurrency) if work(c, lanes) <= MAX_SIMULATED_TASKS), default=None)
    ways = ([f"--lanes {fewer_lanes}" + (" or fewer" if fewer_lanes > 1 else "")] if fewer_lanes else []) + (
        [f"--concurrency {lower} or lower"] if lower else []
    )
    if ways:
        hint = "use " + ", or ".join(ways)
    elif work(1, 1) <= MAX_SIMULATED_TASKS:
        hint = "lower both --concurrency and --lanes"
    else:
        hint = f"the model has too many ops for it: --concurrency 1 --lanes 1 alone simulates {work(1, 1):,} tasks"
    counted = len(lane_counts(concurrency, lanes))
    raise InputError(
        f"--concurrency {concurrency} --lanes {lanes} would simulate {total:,} tasks ({plans} plan(s) x {counted} lane "
        f"count(s) x {1 + corners} host assumptions x {REQUESTS_PER_SLOT * concurrency:,} requests of {ops:,} ops, "
        f"then the table's concurrencies): at most {MAX_SIMULATED_TASKS:,} are simulated in one run; {hint}"
    )


def table(cost_model, partition, streams, lanes, concurrencies=CONCURRENCIES, known=None):
    """Throughput and latency for every concurrency in ``concurrencies`` and every lane count 1..``lanes``.
    ``known`` ({(concurrency, lanes): figures of ``load``}) holds loads already simulated with these arguments."""
    rows = []
    for c in concurrencies:
        copies = None
        figures = {}
        for k in range(1, lanes + 1):
            same = min(k, lane_counts(c, lanes)[-1])
            if same not in figures:
                figures[same] = (known or {}).get((c, same))
            if figures[same] is None:
                copies = copies or _Copies(cost_model, REQUESTS_PER_SLOT * c)
                figures[same] = load(cost_model, partition, streams, c, same, copies=copies)
            rows.append({"concurrency": c, "lanes": k, **_flat(figures[same])})
    return rows


def _flat(figures):
    latency = figures["latency_ms"]
    return {
        "requests_per_s": figures["requests_per_s"],
        "records_per_s": figures["records_per_s"],
        **{f"{q}_ms": latency[q] for q in ("p50", "p95", "p99")},
    }


def recommend(cost_model, plans, concurrency, lanes):
    """The lanes and streams per lane to use at ``concurrency``, robust over the host assumptions.

    ``plans`` maps streams per lane to one request's plan and holds 1 (the one-stream plan, {}). Every
    candidate (1..``lanes`` lanes x each plan) is simulated at the point estimate and at every corner of the
    host box (msopt.simulator.uncertainty); the baseline is one lane of one stream. A candidate is robust when its
    throughput is at least the baseline's at every corner; the recommendation is the robust candidate with
    the most throughput at the point estimate, candidates within CLOSE of it counting as ties, which go to
    fewer lanes x streams, then fewer lanes."""
    return _recommendation(candidate_rows(cost_model, plans, concurrency, lanes), concurrency)


def candidate_rows(cost_model, plans, concurrency, lanes):
    """Per plan and lane count 1..``lanes``: {lanes, streams_per_lane, figures (``load``'s at the point estimate),
    corners (requests/s at each corner of the host box)}."""
    from msopt.simulator.uncertainty import corner_models

    corners = corner_models(cost_model)
    copies = _Copies(cost_model, REQUESTS_PER_SLOT * concurrency)
    rows = []
    for n, partition in sorted(plans.items()):
        simulated = {}
        for k in range(1, lanes + 1):
            same = min(k, lane_counts(concurrency, lanes)[-1])
            if same not in simulated:
                point = load(cost_model, partition, n, concurrency, same, copies=copies)
                at = [
                    load(cm, partition, n, concurrency, same, copies=copies.on(cm.target))["requests_per_s"]
                    for cm in corners
                ]
                simulated[same] = point, at
            point, at = simulated[same]
            rows.append({"lanes": k, "streams_per_lane": n, "figures": point, "corners": list(at)})
    return rows


def _recommendation(rows, concurrency):
    """``recommend``'s document from ``candidate_rows``' rows (each gets its gains and whether it is robust)."""
    base = next(r for r in rows if r["lanes"] == 1 and r["streams_per_lane"] == 1)
    for r in rows:
        pairs = list(zip(r["corners"], base["corners"])) + [
            (r["figures"]["requests_per_s"], base["figures"]["requests_per_s"])
        ]
        r["gains"] = [x / b if b > 0 else 1.0 for x, b in pairs]
        r["robust"] = min(r["gains"]) >= 1.0 - TOLERANCE
    order = sorted(
        rows, key=lambda r: (-r["figures"]["requests_per_s"], r["lanes"] * r["streams_per_lane"], r["lanes"])
    )
    top = next(r for r in order if r["robust"])["figures"]["requests_per_s"]
    close = [r for r in order if r["robust"] and r["figures"]["requests_per_s"] >= top * (1 - CLOSE)]
    chosen = min(close, key=lambda r: (r["lanes"] * r["streams_per_lane"], r["lanes"]))
    passed = order[0] if not order[0]["robust"] else None
    document = {
        "lanes": chosen["lanes"],
        "streams_per_lane": chosen["streams_per_lane"],
        "concurrency": concurrency,
        **_flat(chosen["figures"]),
        **_ranges(chosen),
        "robust": True,
        "baseline": "1 lane x 1 stream",
        "candidates": [
            {
                "lanes": r["lanes"],
                "streams_per_lane": r["streams_per_lane"],
                "requests_per_s": r["figures"]["requests_per_s"],
                **_ranges(r),
                "robust": r["robust"],
            }
            for r in rows
        ],
        "note": "",
    }
    if passed is not None:
        lo, hi = _ranges(passed)["gain_range"]
        document["note"] = (
            f"passed over {passed['lanes']} lane(s) x {passed['streams_per_lane']} stream(s), the most throughput at "
            f"the point estimate ({passed['figures']['requests_per_s']:.6g} requests/s), as it is slower than one "
            f"lane of one stream under some host assumptions ({lo:.3g}x-{hi:.3g}x)"
        )
    return document


def _ranges(row):
    values = row["corners"] + [row["figures"]["requests_per_s"]]
    point = row["gains"][-1]
    return {
        "requests_per_s_range": [round(min(values), 3), round(max(values), 3)],
        "gain": round(point, 4),
        "gain_range": [round(min(row["gains"]), 4), round(max(row["gains"]), 4)],
    }


def report(cost_model, partition, streams, concurrency, lanes, progress=None):
    """The ``load`` document of `msopt simulate --concurrency C --lanes K`: the figures at (C, K lanes x
    ``streams``), their range over the host assumptions, the table and the recommendation."""
    say = progress or (lambda message: None)
    if concurrency < 1 or lanes < 1:
        raise InputError(f"--concurrency and --lanes must be at least 1, got {concurrency} and {lanes}")
    plans = {1: {}, streams: partition} if len(set(streams_of(cost_model, partition))) > 1 else {1: {}}
    n = streams if streams in plans else 1
    concurrencies = sorted(set(CONCURRENCIES) | {concurrency})
    check_work(cost_model, len(plans), concurrency, lanes)
    say(f"simulating {concurrency} request(s) in flight on 1..{lanes} lane(s), at every host corner")
    rows = candidate_rows(cost_model, plans, concurrency, lanes)
    best = _recommendation(rows, concurrency)
    asked = next(r for r in best["candidates"] if r["lanes"] == lanes and r["streams_per_lane"] == n)
    points = {(concurrency, r["lanes"]): r["figures"] for r in rows if r["streams_per_lane"] == n}
    figures = points[(concurrency, lanes)]  # the same simulation as load(cost_model, plans[n], n, concurrency, lanes)
    say(f"simulating concurrency {', '.join(map(str, concurrencies))} on 1..{lanes} lane(s)")
    batch = cost_model.batch_size
    return {
        "concurrency": concurrency,
        "lanes": lanes,
        "streams_per_lane": n,
        "batch_size": batch,
        **_flat(figures),
        "requests_per_s_range": asked["requests_per_s_range"],
        "records_per_s_range": [round(x * batch, 3) for x in asked["requests_per_s_range"]],
        "requests_simulated": figures["requests_simulated"],
        "table": table(cost_model, plans[n], n, lanes, concurrencies, known=points),
        "recommendation": best,
        # The report's text names this module by its path before the package layout (msopt.simulator.concurrency
        # now): the documents stay byte-identical.
        "simulated": "closed loop on the target GPU's model with the host model's assumptions (msopt.concurrency)",
    }


def describe(figures, batch_size):
    """`4,880 requests/s (312,320 records/s at batch 64)`."""
    return f"{rate(figures['requests_per_s'])} requests/s ({rate(figures['records_per_s'])} records/s at batch {batch_size})"


def rate(value):
    """A throughput for people: `21,773`, `12.5`."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


__all__ = ["CONCURRENCIES", "Requests", "describe", "load", "rate", "recommend", "report", "table"]
