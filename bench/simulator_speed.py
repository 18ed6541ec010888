"""Simulator speed: the compiled event loop against the plain Python loop it replaced, side by side in one run.

On synthetic layered DAGs (64 kernels per layer, 1 to 3 inputs from the previous layers, a layer of
inputs read in place: tests/random_tasks.layered_cost_model) of 10k, 100k and 1M ops, 4 streams
(each layer's ops split in 4 contiguous groups), v100 with the product's host model: one
simulate-like run (waits recorded) through the reference loop (tests/reference_simulator.py) and
through the compiled one (best of ``--repeat``), their figures checked equal. The flat arrays are
built once per cost model and timed apart. The first call of a process (importing numba, loading
the compiled loop from its on-disk cache) and the first call with an empty cache (compiling) are
measured in fresh processes. Times are CPU seconds of the process (user + system), which a loaded
machine inflates less than wall time; the loops are single-threaded.

    python bench/simulator_speed.py                          # 10k, 100k, 1M
    python bench/simulator_speed.py --sizes 10000,100000 --json
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

FIRST_CALL = """
import time
t0 = time.process_time()
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from random_tasks import layered_cost_model
from msopt.simulator.simulate import _run
cm = layered_cost_model(200)
t1 = time.process_time()
_run(cm, 4, [(i % 64) // 16 for i in range(len(cm))], True)
print(time.process_time() - t1)
"""


def first_call(empty_cache, prebuilt=False):
    """Seconds of the first simulation in a fresh process: with the prebuilt extension (msopt.prebuild), else
    just in time (numba's import and the cache's load, or the compilation)."""
    env = dict(os.environ, MSOPT_PREBUILT="1" if prebuilt else "0")
    with tempfile.TemporaryDirectory() as cache:
        if empty_cache:
            env["NUMBA_CACHE_DIR"] = cache
        code = FIRST_CALL.format(root=ROOT, tests=os.path.join(ROOT, "tests"))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def measure(size, repeat):
    import reference_simulator as reference
    from random_tasks import layered_cost_model

    from msopt.simulator.simulate import _run, task_arrays

    cm = layered_cost_model(size)
    stream_of = [(i % 64) // 16 for i in range(size)]
    t0 = time.process_time()
    task_arrays(cm)
    arrays_s = time.process_time() - t0
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        result = _run(cm, 4, stream_of, True)
        best = min(best, time.process_time() - t0)
    t0 = time.process_time()
    expected = reference.run(cm, 4, stream_of, True)
    reference_s = time.process_time() - t0
    same = result.end == expected["end"] and result.start == expected["start"] and result._waits == expected["waits"]
    return {
        "ops": size,
        "reference_s": round(reference_s, 3),
        "compiled_s": round(best, 4),
        "speedup": round(reference_s / best, 1),
        "arrays_s": round(arrays_s, 3),
        "makespan_ms": round(result.makespan_us / 1000, 3),
        "identical": same,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = {
        "first_call_prebuilt_s": round(first_call(False, prebuilt=True), 3),
        "first_call_cached_s": round(first_call(False), 3),
        "first_call_compiling_s": round(first_call(True), 3),
        "rows": [measure(int(s), args.repeat) for s in args.sizes.split(",")],
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print("simulator: reference Python loop vs compiled loop, layered DAGs, 4 streams, v100 host model")
    print("(CPU seconds of this process, CPU figures of the simulation itself)")
    print(f"{'ops':>9} {'reference s':>12} {'compiled s':>11} {'speedup':>8} {'arrays s':>9} {'identical':>9}")
    for r in doc["rows"]:
        print(
            f"{r['ops']:>9} {r['reference_s']:>12} {r['compiled_s']:>11} {r['speedup']:>7}x {r['arrays_s']:>9}"
            f" {str(r['identical']):>9}"
        )
    print(
        f"first call in a fresh process: {doc['first_call_prebuilt_s']} CPU s with the prebuilt extension,"
        f" {doc['first_call_cached_s']} CPU s just in time with the on-disk cache (numba import + load),"
    )
    print(f"{doc['first_call_compiling_s']} CPU s with an empty cache (compilation)")


if __name__ == "__main__":
    main()
