"""Lanes on logical CPU devices: throughput at concurrency 1, 4, 16 with 1, 2, 4 lanes, and the lanes' overhead.

Every configuration runs in this one process, interleaved round by round (the median round is
reported), on a DeepFM-class TF2 SavedModel (sample_models/deepfm_tf2) with shared weights. These are
CPU figures: on a 2-core machine they show the mechanism (requests spread over lanes, each on its own
device), not the gain lanes give on a GPU, where each lane is a virtual GPU with its own compute stream.

The overhead is the time per request of ``msopt``'s lane path (msopt.lanes.lanes.Lanes.step driven
by msopt.lanes.load.drive) over a plain threaded TensorFlow loop calling the same signature
from the same number of threads, with no device scope. Target: <= 1.05.

Next to them, the simulated h100 curve (``msopt simulate --concurrency``, msopt.simulator.concurrency) of a
DeepFM-class model built by deepctr (tests/zoo_models.py, needs TensorFlow and deepctr to build it
once) at batch 1, 64 and 512: requests/s against concurrency 1-32 for 1-4 lanes of the plan's
streams (auto, at most 2), and the recommendation at concurrency 16 with its range over the host
assumptions. These are simulated figures, with the host model's assumptions (docs/reference.md).

    python bench/lanes.py [--batch-size 64] [--requests 400] [--rounds 5] [--simulated-only] [--json]
"""

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msopt.graph.view import GraphView  # noqa: E402
from msopt.load import load  # noqa: E402
from msopt.runner.feeds import make_records  # noqa: E402

MODEL = ROOT / "sample_models" / "deepfm_tf2"
LANES = (4, 2, 1)  # the largest first: TensorFlow's context takes its logical devices once
CONCURRENCY = (1, 4, 16)


def plain_loop(tf, fn, feeds, requests, concurrency):
    """A plain threaded TensorFlow loop: ``concurrency`` threads call ``fn`` until ``requests`` calls are done."""
    tensors = [{k: tf.constant(v) for k, v in f.items()} for f in feeds]
    counter, lock = iter(range(requests)), threading.Lock()
    start = threading.Barrier(concurrency + 1)

    def client():
        start.wait()
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            {k: v.numpy() for k, v in fn(**tensors[i % len(tensors)]).items()}

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began


SIMULATED_BATCHES = (1, 64, 512)
SIMULATED_LANES = 4
SIMULATED_CONCURRENCY = 16  # where the recommendation is made


def simulated_curve(progress=print):
    """The simulated h100 curves of deepctr's DeepFM at each batch size of SIMULATED_BATCHES."""
    import msopt
    from msopt.simulator.host_model import RANGES

    sys.path.insert(0, str(ROOT / "tests"))
    from zoo_models import zoo_model

    model = zoo_model("deepfm")
    curves = []
    for batch in SIMULATED_BATCHES:
        progress(f"simulating deepctr DeepFM on h100 at batch {batch}")
        doc = msopt.simulate(
            model, 2, "auto", target="h100", batch_size=batch, concurrency=SIMULATED_CONCURRENCY, lanes=SIMULATED_LANES
        )
        load = doc["load"]
        curves.append(
            {
                "batch_size": batch,
                "single_request_ms": doc["makespan_ms"],
                "streams_per_lane": load["streams_per_lane"],
                "table": [
                    {k: row[k] for k in ("concurrency", "lanes", "requests_per_s", "records_per_s", "p99_ms")}
                    for row in load["table"]
                ],
                "recommendation": {
                    k: load["recommendation"][k]
                    for k in (
                        "concurrency",
                        "lanes",
                        "streams_per_lane",
                        "requests_per_s",
                        "records_per_s",
                        "requests_per_s_range",
                    )
                    + ("gain", "gain_range", "note")
                },
            }
        )
    return {
        "kind": "simulated (msopt simulate --concurrency, h100 target), not measured",
        "model": "deepctr DeepFM (tests/zoo_models.py: 4 sparse features, 2 dense, DNN 32-16)",
        "assumptions": {"host": doc["host"], "ranges": {k: list(v) for k, v in RANGES.items()}},
        "curves": curves,
    }


def print_simulated(sim):
    print(f"\n{sim['kind']}; {sim['model']}")
    host = sim["assumptions"]["host"]
    print("host model: " + ", ".join(f"{k} {host[k]}" for k in ("op_overhead_us", "launch_us", "launch_contention")))
    for curve in sim["curves"]:
        rows = curve["table"]
        cs = sorted({r["concurrency"] for r in rows})
        print(
            f"batch {curve['batch_size']}: one request {curve['single_request_ms']} ms; requests/s, "
            f"{curve['streams_per_lane']} stream(s) per lane"
        )
        print(f"{'lanes':>7}" + "".join(f"{'C=' + str(c):>9}" for c in cs))
        for k in sorted({r["lanes"] for r in rows}):
            cells = {r["concurrency"]: r["requests_per_s"] for r in rows if r["lanes"] == k}
            print(f"{k:>7}" + "".join(f"{cells[c]:>9.0f}" for c in cs))
        best = curve["recommendation"]
        lo, hi = best["requests_per_s_range"]
        glo, ghi = best["gain_range"]
        print(
            f"  recommended at C={best['concurrency']}: {best['lanes']} lane(s) x {best['streams_per_lane']} "
            f"stream(s), {best['requests_per_s']:.0f} requests/s ({lo:.0f}-{hi:.0f}; {best['records_per_s']:.0f} records/s), "
            f"{best['gain']:.3g}x one lane "
            f"of one stream ({glo:.3g}x-{ghi:.3g}x over the host assumptions)"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--simulated-only", action="store_true", help="only the simulated h100 curve")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.simulated_only:
        sim = simulated_curve(progress=lambda m: print(m, file=sys.stderr))
        print(json.dumps(sim, indent=1)) if args.json else print_simulated(sim)
        return

    from msopt.lanes.lanes import Lanes
    from msopt.lanes.load import drive

    model = load(MODEL)
    view = GraphView(model.graph_def)
    pools = {k: Lanes(model, view, k, 1, "cpu", "shared") for k in LANES}
    tf = pools[1].tf
    name = "serving_default"
    feeds = make_records(pools[1].specs[name]["inputs"], args.batch_size, 4, 0, None, view)
    steps = {k: [[pool.step(lane, name, f) for f in feeds] for lane in range(k)] for k, pool in pools.items()}
    plain_fn = pools[1].executables[0]._functions[name]
    for k in LANES:  # warm up every lane and the plain loop
        drive(steps[k], 4 * k, k)
    plain_loop(tf, plain_fn, feeds, 8, 2)

    walls = {(k, c): [] for k in LANES for c in CONCURRENCY}
    lat = {(k, c): [] for k in LANES for c in CONCURRENCY}
    plain = {c: [] for c in CONCURRENCY}
    for round_ in range(args.rounds):
        for c in CONCURRENCY:
            order = ["plain", *LANES]
            order = order[round_ % len(order) :] + order[: round_ % len(order)]  # no configuration always first
            for k in order:
                if k == "plain":
                    plain[c].append(plain_loop(tf, plain_fn, feeds, args.requests, c))
                    continue
                result = drive(steps[k], args.requests, c)
                walls[(k, c)].append(result["wall"])
                lat[(k, c)].append(sorted(result["latencies"]))
    rows = []
    for c in CONCURRENCY:
        for k in sorted(LANES):
            wall = statistics.median(walls[(k, c)])
            latencies = lat[(k, c)][walls[(k, c)].index(wall)] if wall in walls[(k, c)] else lat[(k, c)][0]
            rows.append(
                {
                    "concurrency": c,
                    "lanes": k,
                    "records_per_s": round(args.requests * args.batch_size / wall, 1),
                    "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3),
                    "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1e3, 3),
                    "overhead_vs_plain": round(wall / statistics.median(plain[c]), 3),
                }
            )
    document = {
        "kind": "CPU figures (logical CPU devices on this machine), not a GPU measurement",
        "model": "sample_models/deepfm_tf2 (shared weights)",
        "batch_size": args.batch_size,
        "requests_per_cell": args.requests,
        "rounds": args.rounds,
        "plain_loop_records_per_s": {
            str(c): round(args.requests * args.batch_size / statistics.median(plain[c]), 1) for c in CONCURRENCY
        },
        "rows": rows,
        "overhead_target": 1.05,
    }
    for pool in reversed(list(pools.values())):  # each changed into its own directory after the previous one
        pool.close()
    document["simulated_gpu_curve"] = simulated_curve(progress=lambda m: print(m, file=sys.stderr))
    if args.json:
        print(json.dumps(document, indent=1))
        return
    print(f"Lanes, {document['kind']}; {document['model']}, batch {args.batch_size}, median of {args.rounds} rounds")
    print(f"{'concurrency':>11} {'lanes':>5} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'vs plain loop':>13}")
    for r in rows:
        print(
            f"{r['concurrency']:>11} {r['lanes']:>5} {r['records_per_s']:>10} {r['p50_ms']:>8} {r['p99_ms']:>8} "
            f"{r['overhead_vs_plain']:>13}"
        )
    print(
        "plain threaded loop, records/s: "
        + ", ".join(f"C={c}: {v}" for c, v in document["plain_loop_records_per_s"].items())
    )
    print(f"overhead target (lanes=1 over the plain loop): <= {document['overhead_target']}")
    print_simulated(document["simulated_gpu_curve"])


if __name__ == "__main__":
    main()
