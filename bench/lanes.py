"""Lanes on logical CPU devices: throughput at concurrency 1, 4, 16 with 1, 2, 4 lanes, and the lanes' overhead.

Every configuration runs in this one process, interleaved round by round (the median round is
reported), on a DeepFM-class TF2 SavedModel (sample_models/deepfm_tf2) with shared weights. These are
CPU figures: on a 2-core machine they show the mechanism (requests spread over lanes, each on its own
device), not the gain lanes give on a GPU, where each lane is a virtual GPU with its own compute stream.

The overhead is the time per request of ``msopt``'s lane path (msopt.runner.lanes.Lanes.step driven
by msopt.runner.lanes_load.drive) over a plain threaded TensorFlow loop calling the same signature
from the same number of threads, with no device scope. Target: <= 1.05.

The simulated GPU curve (h100, batch 1/64/512) needs the simulator's host model and
``msopt simulate --concurrency``, which are not built yet; this script does not print it.

    python bench/lanes.py [--batch-size 64] [--requests 400] [--rounds 5] [--json]
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

from msopt.graph import GraphView  # noqa: E402
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from msopt.runner.lanes import Lanes
    from msopt.runner.lanes_load import drive

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
        "simulated_gpu_curve": "not produced: needs the simulator's host model and msopt simulate --concurrency",
    }
    for pool in reversed(list(pools.values())):  # each changed into its own directory after the previous one
        pool.close()
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


if __name__ == "__main__":
    main()
