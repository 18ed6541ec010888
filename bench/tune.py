#!/usr/bin/env python
"""Benchmark: `msopt tune` on the CPU, on two sample models and one keras.applications model.

For each model, one `msopt tune --json` process (logical CPU devices: the figures are CPU figures
and do not predict a GPU). Prints, per candidate, the simulated time (msopt's GPU simulator with
the measured per-op times), the measured median and spread, their ratio and whether the candidate
verified; then the choice, the lane counts (with --lanes), the host model fitted to the measured plans
(simulator error before and after) and the time tune took.

    python bench/tune.py [--streams 2] [--rounds 5] [--steps 20] [--lanes K --concurrency C] [--json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["towers_tf1", "deepfm_tf2"]
KERAS = ("MobileNetV2", {"input_shape": (96, 96, 3)})  # tf-keras, weights=None, cached where the tests cache it


def keras_model():
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import keras_application

    return str(keras_application(KERAS[0], **KERAS[1]))


def tune(model, args, out):
    started = time.perf_counter()
    command = [sys.executable, "-m", "msopt", "tune", model, "--streams", str(args.streams), "--device", "cpu"]
    command += ["--rounds", str(args.rounds), "--steps", str(args.steps), "--batch-size", str(args.batch_size)]
    if args.lanes:
        command += ["--lanes", str(args.lanes), "--concurrency", str(args.concurrency)]
    command += ["-o", str(out), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{model}: {done.stderr.strip()}")
    doc = json.loads(done.stdout)
    doc["wall_s"] = round(wall, 1)
    return doc


def show(name, doc):
    print(f"\n{name}: {doc['device']['type'].upper()} x{len(doc['device']['devices'])}, tune took {doc['wall_s']} s")
    print(f"  {'candidate':<34} {'simulated ms':>12} {'measured ms':>11} {'spread':>7} {'ratio':>6}  verified")
    for row in doc["candidates"]:
        m = row["measured"]
        print(
            f"  {row['label'][:34]:<34} {row['simulated_ms']:>12.4g} {(format(m['median_ms'], '.4g') if m else '-'):>11} "
            f"{(format(m['spread_ms'], '.3g') if m else '-'):>7} "
            f"{(format(row['measured_over_simulated'], '.3g') if row['measured_over_simulated'] else '-'):>6}  "
            f"{'yes' if row['verified'] else 'NO'}"
        )
    print(f"  chosen: {doc['chosen']}: {doc['why']}")
    for row in (doc.get("lanes") or {}).get("candidates", []):
        m = row["measured"]
        rate = f"{m['records_per_s']['median']:.5g} records/s, median {m['median_ms']:.4g} ms" if m else "-"
        print(f"  {row['label']:<34} {rate}  {'yes' if row['verified'] else 'NO'}")
    if doc.get("lanes"):
        print(f"  lanes chosen: {doc['lanes']['chosen']}: {doc['lanes']['why']}")
    fit = doc.get("host_fit")
    if fit:
        values = ", ".join(f"{k} {v:g}" for k, v in fit["fitted"].items())
        print(
            f"  host model fitted to {fit['points']} plan(s): {values}; residual {fit['residual_rms_log']:g}; "
            f"simulator error {fit['error_before']:.1%} before, {fit['error_after']:.1%} after"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lanes", type=int, default=None, help="also measure the chosen plan on 1..K lanes")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads with --lanes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = [(name, str(ROOT / "sample_models" / name)) for name in SAMPLES] + [(KERAS[0], keras_model())]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models:
            results[name] = tune(path, args, Path(tmp) / f"{name}_tuned")
            if not args.json:
                show(name, results[name])
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("\nCPU figures (logical CPU devices sharing the host's cores): they do not predict a GPU.")


if __name__ == "__main__":
    main()
