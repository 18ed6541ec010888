#!/usr/bin/env python
"""Benchmark: `msopt run`'s steady-state step time against a plain TensorFlow loop, side by side in one run.

For each model, one fresh process loads the model twice: through msopt's runner (placement,
device configuration, the step and timing loop `msopt run` uses) and the way a user's plain loop
does (TF2: ``loaded.signatures[name](**tensors)``, inputs made tensors once; TF1:
``session.run(fetches, feed_dict)``). Both run the same signature on the same inputs in
alternating blocks of steps, so both see the same machine load; the figure for each side is the
median of all its step times, and the ratio msopt / plain (target: at most 1.05).

    python bench/run_overhead.py [--blocks 20] [--steps 100] [--json]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["towers_tf2", "deepfm_tf2", "towers_tf1", "deepfm_tf1"]
TARGET = 1.05


def side_by_side(path, blocks, steps, batch_size):
    """In this process: alternate blocks of msopt's steps and a plain loop's steps; return the medians."""
    import time

    import numpy as np

    from msopt.files.inputs import random_inputs
    from msopt.graph.view import GraphView
    from msopt.load import load
    from msopt.runner.placed_model import Runner
    from msopt.runner.timing import measure

    model = load(path)
    runner = Runner(model, GraphView(model.graph_def), 1, "cpu")
    tf = runner.tf
    spec = runner.specs["serving_default"]
    feeds = random_inputs(spec["inputs"], batch_size, seed=0)
    ours = [runner.executable.step("serving_default", feeds)]
    if model.is_tf2:
        fn = tf.saved_model.load(str(path)).signatures["serving_default"]
        tensors = {k: tf.constant(v) for k, v in feeds.items()}
        plain = lambda: {k: v.numpy() for k, v in fn(**tensors).items()}  # noqa: E731
    else:
        graph, v1 = tf.Graph(), tf.compat.v1
        session = v1.Session(graph=graph)
        with graph.as_default():
            v1.saved_model.loader.load(session, ["serve"], str(path))
        fetches = {k: v["name"] for k, v in spec["outputs"].items()}
        feed_dict = {spec["inputs"][k]["name"]: v for k, v in feeds.items()}
        plain = lambda: session.run(fetches, feed_dict)  # noqa: E731
    mine, theirs = [], []
    for _ in range(20):
        ours[0]()
        plain()
    for _ in range(blocks):
        mine += measure(ours, steps, 0)[0]
        for _ in range(steps):
            t = time.perf_counter()
            plain()
            theirs.append(time.perf_counter() - t)
    runner.close()
    return {"msopt_p50_ms": float(np.median(mine)) * 1e3, "plain_p50_ms": float(np.median(theirs)) * 1e3}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this model in this process
    args = parser.parse_args()
    if args.one:
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        print(json.dumps(side_by_side(ROOT / "sample_models" / args.one, args.blocks, args.steps, args.batch_size)))
        return 0
    rows = []
    for name in args.models.split(","):
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                name,
                "--blocks",
                str(args.blocks),
                "--steps",
                str(args.steps),
                "--batch-size",
                str(args.batch_size),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        if done.returncode != 0:
            raise SystemExit(f"{name}: {done.stderr.strip()[-800:]}")
        row = {"model": name, **{k: round(v, 4) for k, v in json.loads(done.stdout.splitlines()[-1]).items()}}
        row["ratio"] = round(row["msopt_p50_ms"] / row["plain_p50_ms"], 3)
        row["met"] = row["ratio"] <= TARGET
        rows.append(row)
        print(
            f"{name:12} msopt {row['msopt_p50_ms']:8.4f} ms  plain {row['plain_p50_ms']:8.4f} ms  "
            f"ratio {row['ratio']:.3f}  {'met' if row['met'] else 'NOT met'} (target <= {TARGET})",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps({"target": TARGET, "blocks": args.blocks, "steps": args.steps, "rows": rows}, indent=2))
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
