"""Quality benchmark: simulated makespan of every policy on the sample models and four keras.applications models.

For each model, batch size (1, 32) and stream count (2, 4, 8), each policy's plan goes
through the constraints (as `msopt partition` does) and the simulator (msopt.simulator.simulate) on
the target GPU: makespan, ratio to the lower bound, syncs, bytes copied, planning time.
Policies: one stream, round-robin (node i of a topological order on stream i mod N: the
naive baseline), chains, embedding (where the model has embedding lookups), and auto.
Targets (issue 4): auto is the best policy, or within 1% of it, on every row; its mean ratio
to the lower bound is at most 1.15.

    python bench/partition_quality.py                   # everything (builds the Keras models once, cached)
    python bench/partition_quality.py --models retinanet,bert --batches 1   # the large models (built once, cached)
    python bench/partition_quality.py --models linreg_tf1,deepfm_tf1 --streams 2 --json
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SAMPLES = [
    "linreg_tf1",
    "linreg_tf2",
    "towers_tf1",
    "towers_tf2",
    "stage_tf1",
    "stage_tf2",
    "deepfm_tf1",
    "deepfm_tf2",
    "linreg_frozen.pb",
    "towers_tf1.meta",
    "custom_op_tf1",
]
# Built with tf-keras, weights=None, cached where the tests cache them (MobileNetV2 at the tests' 96x96 input).
KERAS = {"InceptionV3": {}, "NASNetMobile": {}, "ResNet50": {}, "MobileNetV2": {"input_shape": (96, 96, 3)}}
# Larger models, on request (--models retinanet,bert): a RetinaNet-class detector and the tests' BERT-style encoder.
LARGE = ["retinanet", "bert"]

# A RetinaNet-class detector with the structure of TF Model Garden's exports: a ResNet50 backbone (tf-keras,
# weights=None, 384x384), an FPN on C3-C5 plus P6/P7, class and box towers of four 3x3 convolutions shared over
# the five levels, sigmoid scores, and a per-class detection generator: one functional While (tf.map_fn over
# the batch) per class, each running top-k, a gather and non-max suppression. 90 classes, as COCO's exports.
RETINANET_CODE = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf, tf_keras as keras
classes, size, anchors = int(sys.argv[2]), 384, 9
keras.utils.set_random_seed(0)
L = keras.layers
backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(size, size, 3))
c3, c4, c5 = (backbone.get_layer(n).output for n in ("conv3_block4_out", "conv4_block6_out", "conv5_block3_out"))
p5 = L.Conv2D(256, 1)(c5)
p4 = L.Add()([L.UpSampling2D()(p5), L.Conv2D(256, 1)(c4)])
p3 = L.Add()([L.UpSampling2D()(p4), L.Conv2D(256, 1)(c3)])
levels = [L.Conv2D(256, 3, padding="same")(p) for p in (p3, p4, p5)]
p6 = L.Conv2D(256, 3, strides=2, padding="same")(c5)
levels += [p6, L.Conv2D(256, 3, strides=2, padding="same")(L.ReLU()(p6))]
def tower(outputs):
    convs = [L.Conv2D(256, 3, padding="same", activation="relu") for _ in range(4)]
    convs.append(L.Conv2D(anchors * outputs, 3, padding="same"))
    def apply(x):
        for conv in convs:
            x = conv(x)
        return L.Reshape((-1, outputs))(x)
    return apply
cls_tower, box_tower = tower(classes), tower(4)
logits = L.Concatenate(axis=1)([cls_tower(p) for p in levels])
boxes = L.Concatenate(axis=1)([box_tower(p) for p in levels])
net = keras.Model(backbone.input, [logits, boxes])

class Detector(tf.Module):
    def __init__(self):
        self.net = net

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32, name="images")])
    def __call__(self, images):
        logits, boxes = self.net(images, training=False)
        scores = tf.sigmoid(logits)
        per_class = []
        for c in range(classes):
            def detect(args):
                s, b = args
                top, idx = tf.math.top_k(s, k=100)
                chosen = tf.gather(b, idx)
                keep = tf.image.non_max_suppression(chosen, top, 20, iou_threshold=0.5)
                kept = tf.gather(top, keep)
                return tf.pad(kept, [[0, 20 - tf.shape(kept)[0]]])
            per_class.append(tf.map_fn(detect, (scores[:, :, c], boxes), fn_output_signature=tf.float32))
        return {"detection_scores": tf.stack(per_class, axis=1)}

module = Detector()
tmp = sys.argv[1] + ".partial"
tf.saved_model.save(module, tmp, signatures={"serving_default": module.__call__})
os.replace(tmp, sys.argv[1])
"""


def retinanet(classes=90):
    """The RetinaNet-class detector above, built once and cached where the tests cache models."""
    import shutil
    import subprocess

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import CACHE, built_once

    target = CACHE / f"retinanet_c{classes}"

    def build():
        shutil.rmtree(str(target) + ".partial", ignore_errors=True)
        subprocess.run(
            [sys.executable, "-c", RETINANET_CODE, str(target), str(classes)],
            check=True,
            capture_output=True,
            timeout=1800,
        )

    return built_once(target, build)


POLICIES = ["one-stream", "round-robin", "chains", "embedding", "auto"]


def model_path(name):
    if name == "retinanet":
        return str(retinanet())
    if name == "bert":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from conftest import transformer_encoder

        return str(transformer_encoder())
    if name in KERAS:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from conftest import keras_application

        return str(keras_application(name, **KERAS[name]))
    return os.path.join(ROOT, "sample_models", name)


def round_robin(view, streams):
    from msopt.rules.walk import flatten

    dag = flatten(view)
    stream_of = [0] * len(dag)
    for position, v in enumerate(dag.order):
        stream_of[v] = position % streams
    return dag.partition(stream_of)


def plan_for(policy, view, streams, cost, model):
    """(partition after the constraints, planning seconds, auto's notes) or None when the policy does not apply."""
    from msopt.planning.constraints import apply
    from msopt.planning.plan import PlanOptions, make_plan

    notes = []
    started = time.perf_counter()
    if policy == "one-stream":
        plan = {}
    elif policy == "round-robin":
        plan = apply(view, round_robin(view, streams), streams)[0]
    else:
        result = make_plan(view, PlanOptions(streams=streams, policy=policy, const_dup=False), model, cost)
        plan, notes = result.partition, result.notes
        if policy == "embedding" and not plan:
            return None
    return plan, time.perf_counter() - started, notes


def run(models, batches, stream_counts, target):
    from msopt.graph.view import GraphView
    from msopt.load import load
    from msopt.simulator.cost import CostModel
    from msopt.simulator.simulate import simulate

    rows = []
    for name in models:
        model = load(model_path(name))
        view = GraphView(model.graph_def)
        for batch in batches:
            cost = CostModel(view, model, target=target, batch_size=batch)
            for streams in stream_counts:
                for policy in POLICIES:
                    found = plan_for(policy, view, streams, cost, model)
                    if found is None:
                        continue
                    plan, seconds, notes = found
                    sim = simulate(view, plan, streams, cost).report()
                    rows.append(
                        {
                            "model": name,
                            "batch": batch,
                            "streams": streams,
                            "policy": policy,
                            "makespan_ms": sim["makespan_ms"],
                            "single_stream_ms": sim["single_stream_ms"],
                            "lower_bound_ms": sim["lower_bound_ms"],
                            "ratio_to_bound": sim["ratio_to_bound"],
                            "syncs": sim["syncs"],
                            "copy_bytes": sim["copy_bytes"],
                            "plan_s": round(seconds, 3),
                            "notes": notes,
                        }
                    )
                print(f"{name} batch {batch} streams {streams}: done", file=sys.stderr)
    return rows


def judge(rows):
    """Per (model, batch, streams): auto's makespan over the best policy's; and auto's mean ratio to bound."""
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["batch"], r["streams"]), []).append(r)
    verdicts = []
    for (model, batch, streams), group in groups.items():
        best = min(group, key=lambda r: r["makespan_ms"])
        auto = next(r for r in group if r["policy"] == "auto")
        over = auto["makespan_ms"] / best["makespan_ms"] - 1 if best["makespan_ms"] > 0 else 0.0
        verdicts.append(
            {
                "model": model,
                "batch": batch,
                "streams": streams,
                "best_policy": best["policy"],
                "auto_over_best": round(over, 4),
                "ok": over <= 0.01,
            }
        )
    autos = [r["ratio_to_bound"] for r in rows if r["policy"] == "auto"]
    mean_ratio = sum(autos) / len(autos) if autos else None
    return {
        "rows_within_1pct": sum(v["ok"] for v in verdicts),
        "rows": len(verdicts),
        "auto_mean_ratio_to_bound": round(mean_ratio, 4) if mean_ratio else None,
        "met_best": all(v["ok"] for v in verdicts),
        "met_ratio": mean_ratio is not None and mean_ratio <= 1.15,
        "misses": [v for v in verdicts if not v["ok"]],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SAMPLES + list(KERAS)))
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--streams", default="2,4,8")
    parser.add_argument("--target", default="v100")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    rows = run(
        args.models.split(","),
        [int(b) for b in args.batches.split(",")],
        [int(s) for s in args.streams.split(",")],
        args.target,
    )
    summary = judge(rows)
    if args.json:
        print(json.dumps({"target": args.target, "rows": rows, "summary": summary}, indent=2))
        return
    print(
        f"{'model':16} {'batch':>5} {'N':>2} {'policy':12} {'makespan ms':>12} {'ratio':>7} {'syncs':>6} {'copied B':>10} {'plan s':>7}"
    )
    for r in rows:
        print(
            f"{r['model']:16} {r['batch']:>5} {r['streams']:>2} {r['policy']:12} {r['makespan_ms']:>12.4f} "
            f"{r['ratio_to_bound']:>7.3f} {r['syncs']:>6} {r['copy_bytes']:>10} {r['plan_s']:>7.2f}"
        )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
