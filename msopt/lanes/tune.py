"""Lane candidates: the chosen plan on 1..K lanes under C client threads (the runner's lanes path), each verified
bitwise on every response, measured in interleaved rounds; throughput is the figure when C > 1, latency when C = 1."""

from __future__ import annotations

import numpy as np

from msopt.errors import InputError, check_interrupted


def lane_label(lanes, concurrency):
    return f"{lanes} lane{'s' if lanes > 1 else ''}, {concurrency} client thread{'s' if concurrency > 1 else ''}"


def measure_lanes(config, model, view, streams, signature, feeds, expected, batch, deadline, stack, progress, tick):
    """(rows, Rounds) of the lane candidates: ``model`` (the chosen plan, ``streams`` per lane) on 1..config.lanes
    lanes, every response checked against ``expected`` (the original's outputs per record)."""
    from msopt.lanes.lanes import Lanes
    from msopt.lanes.load import compare_all, drive
    from msopt.runner.tensorflow_runtime import error_line
    from msopt.tune.measure import run_rounds, summary, warm_up

    concurrency = config.concurrency
    rows, drivers, walls, latencies = [], {}, {}, {}
    requests = config.steps * concurrency  # per candidate per round: about --steps requests per client thread
    for k in range(1, config.lane_count + 1):
        label = lane_label(k, concurrency)
        progress(f"loading and verifying {label}")
        row = {
            "label": label,
            "kind": "lanes",
            "streams": streams,
            "streams_used": streams,
            "lanes": k,
            "concurrency": concurrency,
            "simulated_ms": None,  # not simulated here yet (msopt simulate --concurrency --lanes is)
            "measured": None,
            "measured_over_simulated": None,
            "verified": False,
            "max_abs_diff": None,
        }
        rows.append(row)
        try:
            pool = Lanes(model, view, k, streams, config.device)
            stack.callback(pool.close)
            row["weights"] = pool.weights
            executed = pool.executed_devices(signature, feeds[0])  # each lane's first call: where its ops ran
            row["pinned"] = all(lane["pinned"] for lane in executed.values())
            steps = [[pool.step(lane, signature, f) for f in feeds] for lane in range(k)]
            checked = drive(steps, max(k * len(feeds), 2 * concurrency), concurrency, keep_outputs=True)
        except Exception as e:  # a lane count TensorFlow refuses is discarded, not the whole tune
            check_interrupted()  # unless the error is an interrupt TensorFlow turned into its own
            if not (isinstance(e, InputError) or type(e).__module__.startswith("tensorflow")):
                raise
            row["discarded"] = f"TensorFlow cannot run it: {e if isinstance(e, InputError) else error_line(e)}"
            continue
        row["verified"], row["max_abs_diff"], differing = compare_all(expected, checked["responses"])
        if not row["verified"]:
            row["discarded"] = (
                f"responses differ from the original's (requests {differing[:5]}, max abs diff {row['max_abs_diff']:g})"
            )
            continue
        walls[label], latencies[label] = [], []
        drivers[label] = _driver(drive, steps, requests, concurrency, walls[label], latencies[label])
    rounds = None
    if drivers:
        progress(f"measuring {len(drivers)} lane count(s) under {concurrency} client thread(s)")
        warm_up(drivers, 1)
        rounds = run_rounds(drivers, config.rounds, 1, deadline, tick)
        for row in rows:
            if row["label"] in drivers and rounds.rounds:
                done = rounds.rounds  # complete rounds only: a round Ctrl-C cut short is dropped
                row["measured"] = summary([t for per_round in latencies[row["label"]][1 : done + 1] for t in per_round])
                throughput = [requests * batch / w for w in walls[row["label"]][1 : done + 1]]
                p25, p50, p75 = np.percentile(throughput, [25, 50, 75])
                row["measured"]["records_per_s"] = {
                    "median": round(float(p50), 2),
                    "spread": round(float(p75 - p25), 2),
                    "rounds": done,
                }
    return rows, rounds


def _driver(drive, steps, requests, concurrency, walls, latencies):
    """One round of a lane candidate: ``requests`` requests from ``concurrency`` threads; keeps wall and latencies
    (the warm-up's run is the first entry, dropped by the caller)."""

    def run():
        result = drive(steps, requests, concurrency)
        walls.append(result["wall"])
        latencies.append(result["latencies"])

    return run
