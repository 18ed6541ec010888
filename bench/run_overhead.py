#!/usr/bin/env python
"""Benchmark: `msopt run`'s steady-state step time against a plain TensorFlow loop, side by side in one run.

For each model, both sides run the same signature on the same inputs (one .npz), in fresh
processes, alternating for several rounds; the figure for each side is its best (lowest) median
step time (p50) over the rounds, which filters out rounds slowed by other work on the machine,
and the ratio is msopt / plain (target: at most 1.05). The plain loop is what a user writes:
for a TF2 SavedModel, ``loaded.signatures[name](**tensors)`` with the inputs made tensors once;
for a TF1 SavedModel, ``session.run(fetches, feed_dict)``.

    python bench/run_overhead.py [--iterations 400] [--rounds 3] [--json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ["towers_tf2", "deepfm_tf2", "towers_tf1", "deepfm_tf1"]
TARGET = 1.05

PLAIN_LOOP = r"""
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf
path, npz, iterations, warmup, is_tf2 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "tf2"
with np.load(npz, allow_pickle=True) as data:
    feeds = {k: data[k] for k in data.files}
v1 = tf.compat.v1
if is_tf2:
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    tensors = {k: tf.constant(v) for k, v in feeds.items()}
    step = lambda: {k: v.numpy() for k, v in fn(**tensors).items()}
else:
    graph = tf.Graph()
    session = v1.Session(graph=graph)
    with graph.as_default():
        meta = v1.saved_model.loader.load(session, ["serve"], path)
    sig = meta.signature_def["serving_default"]
    fetches = {k: v.name for k, v in sig.outputs.items()}
    feed_dict = {sig.inputs[k].name: v for k, v in feeds.items()}
    step = lambda: session.run(fetches, feed_dict)
for _ in range(warmup):
    step()
times = []
for _ in range(iterations):
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
times.sort()
print(json.dumps({"p50_ms": times[len(times) // 2] * 1e3, "mean_ms": sum(times) / len(times) * 1e3}))
"""


def make_inputs(model, path, batch_size):
    from msopt.execute import random_inputs
    from msopt.inspect import signatures
    from msopt.load import load

    import numpy as np

    spec = signatures(load(model))["serving_default"]["inputs"]
    np.savez(path, **random_inputs(spec, batch_size, seed=0))


def msopt_side(model, npz, iterations, warmup):
    done = subprocess.run([sys.executable, "-m", "msopt", "run", str(model), "--inputs", str(npz), "--device", "cpu",
                           "--iterations", str(iterations), "--warmup", str(warmup), "--json"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if done.returncode != 0:
        raise SystemExit(f"msopt run failed on {model}: {done.stderr.strip()}")
    doc = json.loads(done.stdout)
    return {"p50_ms": doc["latency_ms"]["p50"], "mean_ms": doc["latency_ms"]["mean"]}


def plain_side(model, npz, iterations, warmup):
    from msopt.load import load

    kind = "tf2" if load(model).is_tf2 else "tf1"
    done = subprocess.run([sys.executable, "-c", PLAIN_LOOP, str(model), str(npz), str(iterations), str(warmup), kind],
                          capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if done.returncode != 0:
        raise SystemExit(f"plain loop failed on {model}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = ROOT / "sample_models" / name
            npz = Path(tmp) / f"{name}.npz"
            make_inputs(model, npz, args.batch_size)
            ours, plain = [], []
            for _ in range(args.rounds):  # alternate, so both sides see the same machine load
                ours.append(msopt_side(model, npz, args.iterations, args.warmup)["p50_ms"])
                plain.append(plain_side(model, npz, args.iterations, args.warmup)["p50_ms"])
            row = {"model": name, "msopt_p50_ms": round(min(ours), 4), "plain_p50_ms": round(min(plain), 4),
                   "rounds_msopt_ms": ours, "rounds_plain_ms": plain}
            row["ratio"] = round(row["msopt_p50_ms"] / row["plain_p50_ms"], 3)
            row["met"] = row["ratio"] <= TARGET
            rows.append(row)
            print(f"{name:12} msopt {row['msopt_p50_ms']:8.4f} ms  plain {row['plain_p50_ms']:8.4f} ms  "
                  f"ratio {row['ratio']:.3f}  {'met' if row['met'] else 'NOT met'} (target <= {TARGET})",
                  file=sys.stderr)
    if args.json:
        print(json.dumps({"target": TARGET, "rows": rows}, indent=2))
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
