"""Planning speed: where `msopt partition` spends its time, step by step, and its cost over `msopt inspect`.

For each model: one in-process breakdown of `msopt partition --streams N` (load, graph view,
flattening, shape inference, the cost model's per-op pass, each auto candidate's plan, the
constraints, the simulations, the single-stream and report simulations, emit), then the two
commands end to end as subprocesses, side by side in the same run (best of ``--repeat``),
and their ratio; the partition also with the just-in-time loops (MSOPT_PREBUILT=0), to show what
the prebuilt extension (python -m msopt.prebuild) saves. Models: a keras.applications NASNetMobile (weights=None) and a RetinaNet-class
detector (a ResNet50 FPN with per-class NMS in functional While loops, see build_detector),
both built once into ``--cache``; any SavedModel path can be given instead. msopt's bytecode is compiled
first, as pip compiles an installed package's.
Targets (planning-speed issue): partition / inspect at most 2.5x on both; auto's plan alone on
NASNetMobile at most 100 ms.

    python bench/plan_speed.py                       # NASNetMobile and the detector, 4 streams
    python bench/plan_speed.py --models path/to/saved_model --json
"""

import argparse
import compileall
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NASNET = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tf_keras as keras
model = keras.applications.NASNetMobile(weights=None)
tf.saved_model.save(model, sys.argv[1])
"""

# A RetinaNet-class detector: ResNet50 backbone, FPN P3-P7, shared 4-conv class and box heads,
# and a per-class detection generator (top-k, NMS per image in a tf.map_fn: one While per class).
DETECTOR = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tf_keras as keras
target, classes, size = sys.argv[1], int(sys.argv[2]), 384
tf.random.set_seed(0)
backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(size, size, 3))
c3, c4, c5 = (backbone.get_layer(n).output for n in ("conv3_block4_out", "conv4_block6_out", "conv5_block3_out"))
L = keras.layers
p5 = L.Conv2D(256, 1)(c5)
p4 = L.Add()([L.UpSampling2D()(p5), L.Conv2D(256, 1)(c4)])
p3 = L.Add()([L.UpSampling2D()(p4), L.Conv2D(256, 1)(c3)])
p3, p4, p5 = (L.Conv2D(256, 3, padding="same")(p) for p in (p3, p4, p5))
p6 = L.Conv2D(256, 3, strides=2, padding="same")(c5)
p7 = L.Conv2D(256, 3, strides=2, padding="same")(L.ReLU()(p6))
A = 9
cls_convs = [L.Conv2D(256, 3, padding="same", activation="relu") for _ in range(4)]
cls_convs.append(L.Conv2D(A * classes, 3, padding="same"))
box_convs = [L.Conv2D(256, 3, padding="same", activation="relu") for _ in range(4)] + [L.Conv2D(A * 4, 3, padding="same")]
def head(convs, x, k):
    for c in convs:
        x = c(x)
    return L.Reshape((-1, k))(x)
cls = L.Concatenate(axis=1)([head(cls_convs, p, classes) for p in (p3, p4, p5, p6, p7)])
box = L.Concatenate(axis=1)([head(box_convs, p, 4) for p in (p3, p4, p5, p6, p7)])
net = keras.Model(backbone.input, [cls, box])

class Detector(tf.Module):
    def __init__(self):
        self.net = net
    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32)])
    def __call__(self, images):
        logits, boxes = self.net(images, training=False)
        scores = tf.sigmoid(logits)
        outs = []
        for c in range(classes):
            def per_image(args):
                s, b = args
                top_s, idx = tf.math.top_k(s, k=100)
                keep = tf.image.non_max_suppression(tf.gather(b, idx), top_s, 20, iou_threshold=0.5)
                kept = tf.gather(top_s, keep)
                return tf.pad(kept, [[0, 20 - tf.shape(kept)[0]]])
            outs.append(tf.map_fn(per_image, (scores[:, :, c], boxes), fn_output_signature=tf.float32))
        return {"detections": tf.stack(outs, axis=1)}

m = Detector()
tf.saved_model.save(m, target, signatures={"serving_default": m.__call__})
"""

BUILDERS = {"NASNetMobile": (NASNET, []), "retinanet_class": (DETECTOR, ["600"])}


def build(name, cache):
    """The SavedModel ``name`` of BUILDERS under ``cache``, built once (TensorFlow, in a subprocess)."""
    path = os.path.join(cache, name)
    if not os.path.isdir(path):
        code, args = BUILDERS[name]
        tmp = path + ".building"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-c", code, tmp, *args], check=True, env={**os.environ, "PYTHONPATH": ROOT})
        os.replace(tmp, path)
    return path


class Clock:
    """Named CPU times of this process (robust to other work on a shared machine), summed over repeated calls."""

    def __init__(self):
        self.times = {}

    @contextlib.contextmanager
    def __call__(self, name):
        started = time.process_time()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.process_time() - started

    def wrap(self, module, attr, name_of):
        """Time every call of ``module.attr`` under ``name_of(*args, **kwargs)``."""
        inner = getattr(module, attr)

        def timed(*args, **kwargs):
            with self(name_of(*args, **kwargs)):
                return inner(*args, **kwargs)

        setattr(module, attr, timed)
        return inner


def breakdown(path, streams):
    """One in-process `msopt partition` of ``path``, its steps timed (seconds)."""
    from msopt import emit
    from msopt.api import _as_written, simulated_figures
    from msopt.compiled.gc_pause import gc_paused
    from msopt.graph import flat
    from msopt.load import open_model
    from msopt.planning import plan
    from msopt.planning.links import view_constraints
    from msopt.planning.partition import summarize
    from msopt.planning.placed_streams import PlacedStreams
    from msopt.planning.plan import PlanOptions, build_cost_model, make_plan
    from msopt.rules import auto
    from msopt.simulator import cost as cost_module
    from msopt.simulator import shapes

    clock = Clock()
    total = time.process_time()
    with clock("load + view"):
        loaded, view = open_model(path)
    with clock("view"):  # the graph view alone, built again
        from msopt.graph.view import GraphView

        GraphView(loaded.graph_def)
    # The cost model's steps, timed inside it: flattening, shapes, the per-op pass is the rest.
    originals = [
        clock.wrap(cost_module, "flat_run", lambda *a, **k: "cost model: flattening"),
        clock.wrap(cost_module, "infer_shapes", lambda *a, **k: "cost model: shapes"),
    ]
    try:
        with clock("cost model (total)"):
            cost_model = build_cost_model(view, loaded, PlanOptions().cost)
    finally:
        cost_module.flat_run, cost_module.infer_shapes = originals
    del flat, shapes
    # The auto search's steps: each candidate's plan, the constraints, the simulations.
    saved = [
        (
            auto,
            "schedule_streams",
            clock.wrap(auto, "schedule_streams", lambda cost, k, chained=False, by_rank=True: _sched_name(k, chained)),
        ),
        (
            auto,
            "run_rule",
            clock.wrap(
                auto, "run_rule", lambda name, v, o, c: f"auto: policy {name}" + (" unit costs" if c is None else "")
            ),
        ),
        (auto, "apply", clock.wrap(auto, "apply", lambda *a, **k: "auto: constraints per candidate (dict path)")),
        (
            PlacedStreams,
            "__call__",
            clock.wrap(PlacedStreams, "__call__", lambda *a, **k: "auto: constraints per candidate"),
        ),
        (auto, "simulate_streams", clock.wrap(auto, "simulate_streams", lambda *a, **k: "auto: simulations")),
        (
            plan,
            "_place_consts",
            clock.wrap(plan, "_place_consts", lambda *a, **k: "plan: Consts moved or copied (the runs as written)"),
        ),
    ]
    try:
        options = PlanOptions(streams=streams)
        with clock("plan (auto search + constraints, total)"):
            with clock("plan: the view's constraint groups (once per model)"), gc_paused():  # as in make_plan
                view_constraints(view, cost_model.tasks.key_set())  # what make_plan computes first
            result = make_plan(view, options, loaded, cost_model)
    finally:
        for owner, attr, inner in saved:
            setattr(owner, attr, inner)
    out = tempfile.mkdtemp(prefix="plan_speed_")
    try:
        with clock("emit"):
            emit.write(loaded, result.partition, os.path.join(out, "m"), const_copies=result.const_copies, view=view)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    with clock("report: simulation, bound and host corners"):  # the run as written: the plan's, simulated there
        sim_cost, sim_plan, simulated = _as_written(view, result, cost_model, loaded, True)
        simulated_figures(view, sim_plan, streams, sim_cost, simulated)
    with clock("report: partition summary"):
        summarize(view, result.partition, streams)
    times = {k: round(v, 4) for k, v in clock.times.items()}
    cm = times["cost model (total)"]
    times["cost model: per-op pass"] = round(
        cm - times.get("cost model: flattening", 0) - times.get("cost model: shapes", 0), 4
    )
    times["all steps"] = round(time.process_time() - total, 3)
    return {
        "nodes": len(view.nodes),
        "op_instances": len(cost_model),
        "chosen": result.report.get("auto", {}).get("chosen"),
        "candidates": len(result.report.get("auto", {}).get("candidates", [])),
        "steps_s": times,
    }


def _sched_name(k, chained):
    return f"auto: {'chain ' if chained else ''}list schedule k={k}"


def end_to_end(path, streams, repeat):
    """Best-of-``repeat`` CPU seconds (user + system of the child) of `msopt inspect`, `msopt partition --streams N`
    and the same partition with the just-in-time loops (MSOPT_PREBUILT=0: numba loaded, its disk cache warm),
    interleaved; CPU time, as wall time moves with the machine's other work."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    best = {"inspect": float("inf"), "partition": float("inf"), "jit": float("inf")}
    for _ in range(repeat):
        out = tempfile.mkdtemp(prefix="plan_speed_")
        try:
            partition = ["partition", path, "--streams", str(streams), "-o", os.path.join(out, "m"), "--force"]
            for name, cmd, extra in (
                ("inspect", ["inspect", path], {}),
                ("partition", partition, {}),
                ("jit", partition, {"MSOPT_PREBUILT": "0"}),
            ):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(
                    [sys.executable, "-m", "msopt", *cmd], check=True, env={**env, **extra}, capture_output=True
                )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                best[name] = min(best[name], cpu)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return {
        "inspect_s": round(best["inspect"], 3),
        "partition_s": round(best["partition"], 3),
        "ratio": round(best["partition"] / best["inspect"], 2),
        "partition_jit_s": round(best["jit"], 3),
        "jit_ratio": round(best["jit"] / best["inspect"], 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="NASNetMobile,retinanet_class", help="builder names or SavedModel paths")
    parser.add_argument("--cache", default=os.path.join(ROOT, ".cache", "bench"))
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="end-to-end runs per command (best kept)")
    parser.add_argument("--no-end-to-end", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--one", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The commands as installed: pip compiles a package's bytecode when it installs it, so the modules are read, not
    # compiled again in every process (where PYTHONDONTWRITEBYTECODE is set, nothing else writes it). A stale
    # file is recompiled; a fresh one is left as is.
    compileall.compile_dir(os.path.join(ROOT, "msopt"), quiet=1)
    if args.one:
        print(json.dumps(breakdown(args.one, args.streams)))
        return
    rows = []
    for name in args.models.split(","):
        path = name if os.path.isdir(name) else build(name, args.cache)
        done = subprocess.run(
            [sys.executable, __file__, "--one", path, "--streams", str(args.streams)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        if done.returncode != 0:
            rows.append({"model": name, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        row = {"model": name, **json.loads(done.stdout)}
        if not args.no_end_to_end:
            row["end_to_end"] = end_to_end(path, args.streams, args.repeat)
        rows.append(row)
        if not args.json:
            print(json.dumps(row), file=sys.stderr)
    from msopt.compiled import jit

    loops = (
        "the prebuilt extension (msopt/_loops)"
        if jit.prebuilt() is not None
        else "just in time (no fresh prebuilt extension: run python -m msopt.prebuild)"
    )
    checks = []
    for row in rows:
        if "end_to_end" in row:
            checks.append({"model": row["model"], "partition_over_inspect": row["end_to_end"]["ratio"], "target": 2.5})
        if row.get("model") == "NASNetMobile" and "steps_s" in row:
            plan = row["steps_s"]["plan (auto search + constraints, total)"]
            checks.append({"model": row["model"], "auto_plan_s": plan, "target": 0.1})
    for c in checks:
        value = c.get("partition_over_inspect", c.get("auto_plan_s"))
        c["met"] = value <= c["target"]
    if args.json:
        print(json.dumps({"rows": rows, "checks": checks, "loops": loops}, indent=2))
        return
    for row in rows:
        if "error" in row:
            print(f"{row['model']}: error {row['error']}")
            continue
        print(f"\n{row['model']}: {row['nodes']} nodes, {row['op_instances']} op instances, chose {row['chosen']}")
        for step, seconds in row["steps_s"].items():
            print(f"  {step:48} {seconds * 1000:10.1f} ms CPU")
        if "end_to_end" in row:
            e = row["end_to_end"]
            print(
                f"  end to end (CPU): inspect {e['inspect_s']} s, partition {e['partition_s']} s, ratio {e['ratio']}x;"
                f" with the just-in-time loops (MSOPT_PREBUILT=0) {e['partition_jit_s']} s, {e['jit_ratio']}x"
            )
    print(f"\nloops: {loops}")
    for c in checks:
        print("  ", c)


if __name__ == "__main__":
    main()
