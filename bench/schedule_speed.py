"""Schedule speed: the planner's list schedules, orders and path cover, plain Python reference vs compiled, side by side.

On synthetic layered DAGs (as bench/partition_scale.py: layers of 64 ops, each reading 1 to 3 ops
of earlier layers, a control edge now and then) of 10k, 100k and 1M op instances, with random
times (a tenth of the ops free, a few neutral), times in one run, per size:
the list schedule on 4 streams by rank (plain) and by chains (chained), Kahn's order, the
longest path to a sink and the greedy path cover, each by the plain Python reference
(tests/reference_schedules.py, the code before it was compiled) and by msopt's compiled
version, with the ratio. The compiled list schedule is timed twice: with its per-cost-model
arrays built (the first schedule of a cost model) and with them kept (every later stream count).
Plans, orders, ranks and chains are checked equal while timing. The first call's cost (numba's
import, then compiling with an empty cache or loading the cache) is measured apart, in fresh
processes. CPU figures, this machine.

    python bench/schedule_speed.py                     # 10k, 100k, 1M
    python bench/schedule_speed.py --sizes 10000 --json
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

WIDTH = 64
STREAMS = 4


class LayeredCost:
    """The parts of a cost model the list schedule reads, over a synthetic layered DAG of ``size`` op instances."""

    def __init__(self, size, seed=0):
        from msopt.graph.flat import Tasks
        from msopt.simulator.targets import DEFAULT_TARGET, TARGETS

        rng = random.Random(seed)
        t = self.tasks = Tasks()
        for i in range(size):
            layer = i // WIDTH
            t.key.append(f"n{i}")
            t.op.append("Op")
            t.instance.append(0)
            inputs = set()
            if layer:
                for _ in range(rng.choice((1, 2, 2, 3))):
                    back = 1 if layer < 2 or rng.random() < 0.9 else rng.randint(2, min(8, layer))
                    inputs.add((layer - back) * WIDTH + rng.randrange(WIDTH))
            t.inputs.append([(j, 0) for j in sorted(inputs)])
            t.control.append([(layer - 1) * WIDTH + rng.randrange(WIDTH)] if layer and rng.random() < 0.05 else [])
        self.duration = [0.0 if rng.random() < 0.1 else rng.uniform(2.0, 40.0) for _ in range(size)]
        self.kernel = [d > 0 for d in self.duration]
        self.share = [rng.choice((1.0, 0.5, 0.1)) if k else 0.0 for k in self.kernel]
        self.neutral = [rng.random() < 0.02 for _ in range(size)]
        self.out_bytes = [[rng.choice((4, 4096, 1 << 16))] for _ in range(size)]
        self.target = TARGETS[DEFAULT_TARGET]


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    out = function(*args, **kwargs)
    return out, time.perf_counter() - started


def graph_lists(cost):
    """(preds, succs) as the reference schedule builds them."""
    t = cost.tasks
    preds = [list(dict.fromkeys([s for s, _ in t.inputs[i]] + t.control[i])) for i in range(len(t.key))]
    succs = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return preds, succs


def measure(size):
    import numpy as np
    import reference_schedules as ref

    from msopt.graph import order
    from msopt.graph.path_cover import greedy_cover_array
    from msopt.rules.chains import greedy_path_cover
    from msopt.rules.walk import Dag
    from msopt.simulator import list_schedule

    warm = LayeredCost(200, seed=1)  # compile or load every kernel before timing
    list_schedule.schedule(warm, 2)
    list_schedule.schedule(warm, 2, chained=True)
    order.topological_order([[1], []], [0, 1])
    cost = LayeredCost(size)
    rows = []

    def row(name, reference_s, compiled_s, note=""):
        rows.append(
            {
                "size": size,
                "step": name,
                "reference_s": round(reference_s, 4),
                "compiled_s": round(compiled_s, 4),
                "speedup": round(reference_s / compiled_s, 1) if compiled_s > 0 else None,
                "note": note,
            }
        )

    for label, chained in (("list schedule (plain)", False), ("list schedule (chained)", True)):
        want, ref_s = timed(ref.schedule, cost, STREAMS, chained=chained)
        fresh = LayeredCost.__new__(LayeredCost)
        fresh.__dict__.update(cost.__dict__)  # the same model, no arrays built yet
        got, first_s = timed(list_schedule.schedule, fresh, STREAMS, chained=chained)
        again, kept_s = timed(list_schedule.schedule, fresh, STREAMS, chained=chained)
        assert got == want and again == want, label
        row(label, ref_s, kept_s, f"first schedule of the cost model (arrays built): {first_s:.4f} s")
    preds, succs = graph_lists(cost)
    degree = [len(p) for p in preds]
    want, ref_s = timed(ref.topological_order, succs, degree)
    got, list_s = timed(order.topological_order, succs, degree)
    indptr, indices = order.csr(succs)
    array, array_s = timed(order.topological_array, indptr, indices, np.asarray(degree))
    assert got == want and array.tolist() == want
    row("Kahn order", ref_s, array_s, f"from Python lists (CSR built per call): {list_s:.4f} s")
    want_rank, ref_s = timed(ref.longest_to_sink, want, succs, cost.duration)
    got, list_s = timed(order.longest_to_sink, want, succs, cost.duration)
    rank, array_s = timed(order.longest_array, array, indptr, indices, np.asarray(cost.duration))
    assert got == want_rank and rank.tolist() == want_rank
    row("longest path to a sink", ref_s, array_s, f"from Python lists: {list_s:.4f} s")
    dag = Dag(cost.tasks.key, preds, succs, cost.tasks)
    want, ref_s = timed(ref.greedy_path_cover, dag)
    got, list_s = timed(greedy_path_cover, dag)
    pred_ptr, pred_idx = order.csr(preds)
    pending = np.diff(indptr)
    chain_of, array_s = timed(greedy_cover_array, pred_ptr, pred_idx, pending, np.arange(size))
    assert got == want and chain_of.tolist() == want
    row("greedy path cover", ref_s, array_s, f"from Python lists (CSR built per call): {list_s:.4f} s")
    return rows


FIRST_CALL = """
import sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/bench")
started = time.perf_counter()
import numba
imported = time.perf_counter() - started
from schedule_speed import LayeredCost
from msopt.simulator import list_schedule
from msopt.graph import order
cost = LayeredCost(200)
started = time.perf_counter()
list_schedule.schedule(cost, 2)
list_schedule.schedule(cost, 2, chained=True)
order.topological_order([[1], []], [0, 1])
order.longest_to_sink([0, 1], [[1], []], [1.0, 1.0])
print(imported, time.perf_counter() - started)
"""


def first_call():
    """{numba import s, compile s (empty cache), cache load s}: each in a fresh process."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, MSOPT_PREBUILT="0")  # the just-in-time form
        out = {}
        for label in ("compile (empty cache)", "load (cache present)"):
            done = subprocess.run(
                [sys.executable, "-c", FIRST_CALL, ROOT], env=env, capture_output=True, text=True, check=True
            )
            imported, first = map(float, done.stdout.split())
            out["numba import s"] = round(imported, 3)
            out[f"first calls, {label} s"] = round(first, 3)
        return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    rows = []
    for size in map(int, args.sizes.split(",")):
        done = subprocess.run([sys.executable, __file__, "--one", str(size)], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"size {size}: {done.stderr.strip().splitlines()[-1:]}")
        rows.extend(json.loads(done.stdout))
        if not args.json:
            print(f"{size} ops done", file=sys.stderr)
    summary = {"rows": rows, "first_call": first_call(), "streams": STREAMS, "figures": "CPU, this machine"}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{'ops':>8} {'step':26} {'reference s':>12} {'compiled s':>11} {'speedup':>8}  note")
    for r in rows:
        print(
            f"{r['size']:>8} {r['step']:26} {r['reference_s']:>12} {r['compiled_s']:>11} {r['speedup']:>7}x  {r['note']}"
        )
    print("first call (fresh processes, CPU figures):", json.dumps(summary["first_call"]))


if __name__ == "__main__":
    main()
