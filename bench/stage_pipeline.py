#!/usr/bin/env python
"""Benchmark: the stage pipeline's throughput against the unpipelined run, side by side in one process.

The model is a bench-only variant of the stage sample model, generated here: the sample's own
preprocessing (CSV-like string lines -> hashed ids, tag lists, numeric features) feeding an MLP
whose depth is calibrated so that the downstream part takes about as long as the preprocessing.
Both parts run single-threaded (intra- and inter-op threads 1), so a record's preprocessing and
the previous record's compute can overlap on two cores.

Three rounds, each measuring everything back to back; the median round is reported. Each round
also measures how much parallelism the machine gives right now (two threads of preprocessing
against one): on a shared machine the pipeline cannot beat that.
Figures: t_stage and t_main (each part alone, per record), unpipelined throughput (the whole
signature, record after record), pipelined throughput (``--stage-threads``, ``--stage-capacity``),
the ideal 1/max(t_stage, t_main). Targets: pipelined/unpipelined >= 1.5 and pipelined/ideal >= 0.85.
The outputs of every record are checked identical between the two runs.

    python bench/stage_pipeline.py [--records 100] [--batch-size 4096] [--rounds 3] [--json]
"""

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

SPEEDUP_TARGET = 1.5
EFFICIENCY_TARGET = 0.85
WIDTH = 128


def samples_module():
    spec = importlib.util.spec_from_file_location("make_samples", ROOT / "sample_models" / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_model(out, depth, samples):
    """A TF1 SavedModel: the stage sample's preprocessing, then ``depth`` dense layers; returns boundary tensors."""
    import tensorflow as tf

    v1 = tf.compat.v1
    rng = np.random.RandomState(7)
    graph = tf.Graph()
    with graph.as_default():
        lines = v1.placeholder(tf.string, [None], name="lines")
        feat = samples._stage_preprocess(lines)
        boundary = sorted(t.name for t in feat.values())
        with tf.name_scope("model"):
            dim = samples.STAGE_DIM
            tables = {
                k: tf.constant(rng.normal(0, 0.1, [samples.STAGE_BUCKETS, dim]).astype(np.float32))
                for k in ("id", "category", "tags")
            }
            e_tags = tf.math.unsorted_segment_sum(
                tf.gather(tables["tags"], feat["tag_ids"]), feat["tag_rows"], tf.size(feat["tag_counts"])
            )
            h = tf.concat(
                [
                    tf.gather(tables["id"], feat["id"]),
                    tf.gather(tables["category"], feat["category"]),
                    e_tags,
                    feat["numeric"],
                ],
                axis=1,
            )
            for _k in range(depth):
                fan_in = int(h.shape[1])
                w = tf.constant((rng.uniform(-1, 1, [fan_in, WIDTH]) / np.sqrt(fan_in)).astype(np.float32))
                h = tf.nn.relu(tf.matmul(h, w))
            prob = tf.sigmoid(tf.reduce_sum(h, axis=1, keepdims=True) * 0.01, name="prob")
        with v1.Session(graph=graph) as session:
            builder = v1.saved_model.Builder(str(out))
            signature = v1.saved_model.predict_signature_def({"lines": lines}, {"prob": prob})
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
            builder.save()
    return boundary


def make_lines(rng, batch_size):
    words = ["foo", "bar", "baz", "qux", "user", "item", "shop", "red", "blue", "x"]
    rows = []
    for _ in range(batch_size):
        tags = "|".join(rng.choice(words) + str(rng.randint(100)) for _ in range(rng.randint(4, 12)))
        rows.append(f"{rng.randint(10**6)},{rng.choice(words)},{tags},{rng.random() * 100:.3f}".encode())
    return np.array(rows, dtype=object)


class Bench:
    """One model in a single-threaded Session, its split at the boundary, and the input records."""

    def __init__(self, path, boundary, records, batch_size, intra=1, inter=2):
        from msopt.graph.view import GraphView
        from msopt.load import load
        from msopt.runner.placed_model import Runner
        from msopt.runner.stage import SessionSplit

        model = load(path)
        self.runner = Runner(
            model, GraphView(model.graph_def), 1, "cpu", intra_op_threads=intra, inter_op_threads=inter
        )
        self.split = SessionSplit(self.runner.executable, "serving_default", boundary)
        rng = np.random.RandomState(11)
        self.feeds = [{"lines": make_lines(rng, batch_size)} for _ in range(8)]
        self.records = records
        self.whole = [self.runner.executable.step("serving_default", f) for f in self.feeds]

    def per_record(self, fn, count):
        fn(0)
        started = time.perf_counter()
        for i in range(count):
            fn(i)
        return (time.perf_counter() - started) / count

    def part_times(self, count=40):
        n = len(self.feeds)
        values = [self.split.upstream(f) for f in self.feeds]
        t_stage = self.per_record(lambda i: self.split.upstream(self.feeds[i % n]), count)
        t_main = self.per_record(lambda i: self.split.downstream(values[i % n], self.feeds[i % n]), count)
        return t_stage, t_main

    def parallel_capacity(self, count=20):
        """How many upstream parts run at once on this machine now: 2 x (one thread) / (two threads, same work)."""
        import threading

        n = len(self.feeds)

        def work():
            for i in range(count):
                self.split.upstream(self.feeds[i % n])

        started = time.perf_counter()
        work()
        one = time.perf_counter() - started
        threads = [threading.Thread(target=work) for _ in range(2)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return 2 * one / (time.perf_counter() - started)

    def unpipelined(self):
        n, outputs = len(self.feeds), []
        started = time.perf_counter()
        for i in range(self.records):
            outputs.append(self.whole[i % n]())
        return self.records / (time.perf_counter() - started), outputs

    def pipelined(self, threads, capacity):
        from msopt.runner.stage_pipeline import StagePipeline

        n, outputs = len(self.feeds), []
        pipeline = StagePipeline(
            lambda i: (i, self.split.upstream(self.feeds[i % n])),
            lambda item: self.split.downstream(item[1], self.feeds[item[0] % n]),
            threads,
            capacity,
        )
        stats = pipeline.run(self.records, lambda i, out: outputs.append(out))
        return stats, outputs


def calibrate(tmp, samples, batch_size):
    """Depth at which the downstream part takes about as long as the preprocessing.

    A linear fit over two depths, then one check of the chosen depth and a step towards balance.
    """

    def measure(depth):
        path = Path(tmp) / f"stage_bench_d{depth}"
        bench = Bench(path, build_model(path, depth, samples), 0, batch_size)
        times = bench.part_times(20)
        bench.runner.close()
        return times

    low, high = measure(2), measure(8)
    per_layer = max((high[1] - low[1]) / 6, 1e-6)
    depth = max(1, round((min(low[0], high[0]) - (low[1] - 2 * per_layer)) / per_layer))
    t_stage, t_main = measure(depth)
    if t_main > 1.1 * t_stage and depth > 1:
        depth -= 1
    elif t_main < 0.9 * t_stage:
        depth += 1
    return depth


def one_round(bench, args):
    """Each part alone, the unpipelined run and the pipelined run, back to back."""
    from msopt.runner.verify import compare_outputs

    t_stage, t_main = bench.part_times()
    capacity = bench.parallel_capacity()
    plain, plain_outputs = bench.unpipelined()
    stats, piped_outputs = bench.pipelined(args.stage_threads, args.stage_capacity)
    identical = len(plain_outputs) == len(piped_outputs) and all(
        compare_outputs(a, b)[0] for a, b in zip(plain_outputs, piped_outputs)
    )
    ideal = 1 / max(t_stage, t_main)
    piped = stats["records_per_s"]
    return {
        "t_stage_ms": round(t_stage * 1e3, 3),
        "t_main_ms": round(t_main * 1e3, 3),
        "unpipelined_records_per_s": round(plain, 2),
        "pipelined_records_per_s": piped,
        "ideal_records_per_s": round(ideal, 2),
        "speedup": round(piped / plain, 3),
        "fraction_of_ideal": round(piped / ideal, 3),
        "identical_outputs": identical,
        "machine_parallel_capacity": round(capacity, 2),
        "pipeline": stats,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stage-threads", type=int, default=1)
    parser.add_argument("--stage-capacity", type=int, default=4)
    parser.add_argument("--intra-op-threads", type=int, default=1)
    parser.add_argument("--inter-op-threads", type=int, default=2)
    parser.add_argument("--depth", type=int, default=None, help="MLP depth (default: calibrated)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    samples = samples_module()
    with tempfile.TemporaryDirectory() as tmp:
        depth = args.depth or calibrate(tmp, samples, args.batch_size)
        path = Path(tmp) / "stage_bench"
        boundary = build_model(path, depth, samples)
        bench = Bench(path, boundary, args.records, args.batch_size, args.intra_op_threads, args.inter_op_threads)
        bench.unpipelined()  # warm-up of both paths
        bench.pipelined(args.stage_threads, args.stage_capacity)
        rounds = [one_round(bench, args) for _ in range(args.rounds)]  # interleaved: both see the same load
        bench.runner.close()
    rounds.sort(key=lambda r: r["speedup"])
    doc = {
        "records": args.records,
        "batch_size": args.batch_size,
        "mlp_depth": depth,
        "mlp_width": WIDTH,
        **rounds[len(rounds) // 2],
        "rounds": [{k: r[k] for k in ("speedup", "fraction_of_ideal")} for r in rounds],
        "targets": {"speedup": SPEEDUP_TARGET, "fraction_of_ideal": EFFICIENCY_TARGET},
    }
    doc["met"] = (
        doc["speedup"] >= SPEEDUP_TARGET
        and doc["fraction_of_ideal"] >= EFFICIENCY_TARGET
        and all(r["identical_outputs"] for r in rounds)
    )
    stats = doc["pipeline"]
    print(
        f"median of {len(rounds)} rounds: t_stage {doc['t_stage_ms']} ms, t_main {doc['t_main_ms']} ms "
        f"(depth {depth}); unpipelined {doc['unpipelined_records_per_s']}/s, pipelined "
        f"{doc['pipelined_records_per_s']}/s, ideal {doc['ideal_records_per_s']}/s; speedup {doc['speedup']} "
        f"(target {SPEEDUP_TARGET}), {doc['fraction_of_ideal']:.0%} of ideal (target {EFFICIENCY_TARGET:.0%}); "
        f"identical outputs: {doc['identical_outputs']}; two threads of preprocessing ran "
        f"{doc['machine_parallel_capacity']}x one; blocked upstream {stats['upstream_blocked_s']} s, "
        f"downstream {stats['downstream_blocked_s']} s -> {'met' if doc['met'] else 'NOT met'}",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(doc, indent=2))
    return 0 if doc["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
