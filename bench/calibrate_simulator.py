"""Calibration: the simulator's multi-stream speedups next to every published figure it can be mapped onto.

One method for every figure (bench/calibration/method.py): build the figure's model (keras.applications,
or a Criteo-shaped deepctr DeepFM for the recommendation figures; weights=None, cached like the tests'
fixtures), plan it with `auto` on 2, 4 and 8 streams of the figure's target at its batch size, keep the
best point estimate, and report its speedup over one stream with its range over the host model's
uncertain constants (msopt.simulator.uncertainty: the corners of launch contention, host cost, copy engine).
Target: the published ratio inside the simulated range and the point within +-25% of it. The figures,
their sources and what each assumes are in bench/calibration/figures.py; figures that cannot be mapped
are listed with the reason. Request-level figures (several queries in flight) are mapped onto one
query's speedup until the simulator models concurrent queries; they are marked.

One cost-model constant, GEMM_OUTPUTS_PER_THREAD, was fitted to Inception-v3's published *sequential
latency* (6.51 ms), not to any ratio. `--sweep` shows how the IOS rows move with it. `--scale N`
instead times the cost model and the simulator on a synthetic layered DAG of N elementwise ops.

    python bench/calibrate_simulator.py [--quick] [--sweep] [--json]
    python bench/calibrate_simulator.py --scale 1000000
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calibration.figures import FIGURES  # noqa: E402
from calibration.method import TOLERANCE, calibrate  # noqa: E402

from msopt.graph.view import GraphView  # noqa: E402
from msopt.simulator import kernels  # noqa: E402
from msopt.simulator.cost import CostModel  # noqa: E402
from msopt.simulator.simulate import simulate  # noqa: E402


def synthetic_graph(nodes, width=50, seed=1):
    """A layered DAG: ``width`` placeholders, then elementwise ops reading 1 or 2 of the last 3 layers."""
    import random

    from msopt.graph import protos

    rng = random.Random(seed)
    graph = protos.GraphDef()
    for i in range(nodes):
        node = graph.node.add(name=f"n{i}")
        node.attr["T"].type = 1
        if i < width:
            node.op = "Placeholder"
            node.attr["dtype"].type = 1
            node.attr["shape"].shape.dim.add(size=-1)
            node.attr["shape"].shape.dim.add(size=64)
            continue
        node.op = rng.choice(("Relu", "AddV2", "Tanh", "AddV2"))
        for _ in range(2 if node.op == "AddV2" else 1):
            node.input.append(f"n{rng.randint(max(0, i - 3 * width), i - 1)}")
    return graph


def scale(nodes):
    import resource

    graph = synthetic_graph(nodes)
    view = GraphView(graph)
    clock = time.process_time
    started = clock()
    cm = CostModel(view, None, target="v100", batch_size=32)
    built = clock() - started
    started = clock()
    one = simulate(view, {}, 1, cm)
    single = clock() - started
    spread = {key: (index * 7919) % 8 for index, key in enumerate(view.nodes)}  # scattered, deterministic
    started = clock()
    eight = simulate(view, spread, 8, cm)
    multi = clock() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "ops": len(cm),
        "cost_model_s": round(built, 2),
        "simulate_one_stream_s": round(single, 2),
        "simulate_eight_streams_s": round(multi, 2),
        "cross_stream_waits": eight.syncs,
        "makespan_ms": [round(one.makespan_us / 1e3, 3), round(eight.makespan_us / 1e3, 3)],
        "peak_rss_mb": round(peak),
    }


def sweep(figures, streams):
    """The IOS rows' point speedups as GEMM_OUTPUTS_PER_THREAD varies."""
    fitted = kernels.GEMM_OUTPUTS_PER_THREAD
    rows = []
    try:
        for value in (0.5, 1.0, fitted, 2.0, 4.0):
            kernels.GEMM_OUTPUTS_PER_THREAD = value
            for figure in figures:
                if figure.source.startswith("IOS") and figure.ratio is not None and figure.batch_size == 1:
                    row = calibrate(figure, streams)
                    rows.append({"gemm_outputs_per_thread": value, "key": figure.key, **_pick(row)})
    finally:
        kernels.GEMM_OUTPUTS_PER_THREAD = fitted
    return rows


def _pick(row):
    return {k: row.get(k) for k in ("single_stream_ms", "speedup", "speedup_range", "gap", "status")}


def print_table(rows):
    print(
        f"simulated; best auto plan over 2, 4 and 8 streams (--quick: 4); request-level rows: lanes; target: published ratio in range, point within +-{TOLERANCE:.0%}"
    )
    print(
        f"{'figure':22} {'model':13} {'target':6} {'batch':>5} {'pub':>6} {'1-str ms':>8} {'sim':>6} "
        f"{'range':>13} {'gap':>7} {'str':>3}  status"
    )
    for r in rows:
        if "speedup" not in r:
            print(f"{r['key']:22} {r['status']}: {r['note']}")
            continue
        lo, hi = r["speedup_range"]
        print(
            f"{r['key']:22} {r['model']:13} {r['target']:6} {r['batch_size']:5} {r['published_ratio']:6.3f} "
            f"{r['single_stream_ms']:8.3f} {r['speedup']:6.3f} {lo:6.3f}-{hi:6.3f} {r['gap']:+7.1%} "
            f"{str(r['streams']):>3}  {r['status']}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one IOS and the recommendation rows, 4 streams only")
    parser.add_argument("--sweep", action="store_true", help="also vary GEMM_OUTPUTS_PER_THREAD (IOS batch-1 rows)")
    parser.add_argument("--scale", type=int, default=None, metavar="N", help="time the simulator on N synthetic ops")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.scale:
        print(json.dumps(scale(args.scale), indent=None if not args.json else 2))
        return
    figures = [f for f in FIGURES if f.quick] if args.quick else FIGURES
    streams = (4,) if args.quick else (2, 4, 8)
    started = time.perf_counter()
    rows = [calibrate(f, streams) for f in figures]
    document = {
        "simulated": True,
        "gemm_outputs_per_thread": kernels.GEMM_OUTPUTS_PER_THREAD,
        "tolerance": TOLERANCE,
        "streams": list(streams),
        "figures": rows,
        "sweep": sweep(figures, streams) if args.sweep else [],
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return
    print_table(rows)
    for s in document["sweep"]:
        print(
            f"sweep: outputs/thread {s['gemm_outputs_per_thread']:<4} {s['key']:22} single {s['single_stream_ms']} ms "
            f"speedup {s['speedup']} {s['speedup_range']}"
        )
    notes = {r["key"]: r["note"] for r in rows if "speedup" in r and r["note"]}
    for key, note in notes.items():
        print(f"note {key}: {note}")


if __name__ == "__main__":
    main()
