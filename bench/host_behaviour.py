#!/usr/bin/env python
"""Experiment: which host threads run each device's ops in TensorFlow's executor, how many at once, at what cost.

CPU figures. TensorFlow runs one executor per device partition; N logical CPU devices take the
same executor code as N virtual GPUs. Each configuration runs in a fresh process (devices are
fixed once per process): a tf.function of `ops` independent cheap ops per device (Mul of a
2-float input by a distinct constant, so that no common-subexpression pass merges them; summed by
one AddN per device), grappler off so nothing is folded.

Two graph shapes:
  local   each device's ops read an input that already lives on that device (one _Arg each)
  fanout  every device's ops read one input that lives on CPU:0 (a _Send/_Recv pair per device)

Two op weights:
  cheap   2 floats per op: below the executor's expensive-op threshold, so run inline
  heavy   65,536 floats per op: stays "expensive", so every op is its own thread-pool task

Thread attribution (which thread runs which device's ops, how many at once): the executor's own
log line for every node it processes (TF_CPP_VMODULE=executor=1: thread id, microsecond
timestamp, node, device), parsed per step. In TF 2.21 the v1 Session's step stats give thread 0
for every node, and the profiler's host trace (XPlane) omits inexpensive ops: it records ops at
trace level 3 only and the Python API ignores `host_tracer_level` in 2.21 (checked: levels 1, 2
and 3 give the same events). Concurrency is counted, not timed: for each step and device, the
span [first, last] of that device's ops on each thread; the most spans that overlap at one
moment is that device's concurrent-thread count.

Per-op cost (no logging): median step time with `ops` ops per device minus the same with one op
per device, over the number of extra ops; repeats interleaved, median and spread (min-max).

    python bench/host_behaviour.py                 # the full table (about 2 minutes)
    python bench/host_behaviour.py --quick --json  # fewer configurations
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

LOG_LINE = re.compile(
    r"^[IWE]\d{4} \S+:(?P<ts>\d+\.\d+)\s+(?P<tid>\d+) executor\.cc:\d+\] Process node: \d+ step (?P<step>-?\d+) "
    r"\{\{node (?P<node>[^}]+)\}\} = (?P<op>[A-Za-z0-9_]+).* device: (?P<device>\S+)$"
)
OP_NAME = re.compile(r"^d(?P<device>\d+)_op\d+$")
HEAVY_SIZE = 65536


def build_function(tf, devices, ops, shape, weight):
    """The probe: `ops` independent Mul ops per device, one AddN per device; inputs per `shape`."""
    size = 2 if weight == "cheap" else HEAVY_SIZE

    @tf.function
    def probe(*inputs):
        outs = []
        for d in range(devices):
            with tf.device(f"/device:CPU:{d}"):
                x = inputs[d] if shape == "local" else inputs[0]
                ys = [tf.multiply(x, float(i + 2), name=f"d{d}_op{i}") for i in range(ops)]
                outs.append(tf.add_n(ys, name=f"d{d}_sum"))
        return outs

    inputs = []
    for d in range(devices if shape == "local" else 1):
        with tf.device(f"/device:CPU:{d}"):
            inputs.append(tf.identity(tf.ones([size])))
    return probe, inputs


def worker(spec):
    """In a fresh process: configure devices and pools, warm up, run; print one JSON line of step times."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * spec["devices"])
    tf.config.threading.set_inter_op_parallelism_threads(spec["inter_op"])
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    fns = {ops: build_function(tf, spec["devices"], ops, spec["shape"], spec["weight"]) for ops in spec["ops_list"]}
    for fn, inputs in fns.values():
        for _ in range(spec["warmup"]):
            fn(*inputs)
    result = {str(ops): [] for ops in fns}
    # Blocks of steps, the ops counts interleaved, so every count sees the same machine load.
    for _ in range(spec.get("blocks", 1)):
        for ops, (fn, inputs) in fns.items():
            sys.stderr.write(f"MEASURE {ops}\n")
            sys.stderr.flush()
            times = []
            for _ in range(spec["steps"]):
                start = time.perf_counter()
                fn(*inputs)
                times.append(time.perf_counter() - start)
            sys.stderr.write(f"END {ops}\n")
            sys.stderr.flush()
            result[str(ops)].append(statistics.median(times))
    print(json.dumps(result))


def run_worker(spec, log):
    """Run one configuration in a subprocess; return (step times per ops count, stderr text)."""
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "0" if log else "3"
    if log:
        env["TF_CPP_VMODULE"] = "executor=1"
    else:
        env.pop("TF_CPP_VMODULE", None)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {spec} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def parse_log(text):
    """The executor's per-node log lines between MEASURE and END: [(step, device, thread, t_us)] for probe ops."""
    events, inside = [], False
    for line in text.splitlines():
        if line.startswith("MEASURE"):
            inside = True
        elif line.startswith("END"):
            inside = False
        elif inside:
            m = LOG_LINE.match(line)
            if not m:
                continue
            name = OP_NAME.match(m["node"])
            if name:
                events.append((m["step"], int(name["device"]), int(m["tid"]), float(m["ts"]) * 1e6))
    return events


def max_overlap(spans):
    """The most [start, end] spans that overlap at one moment."""
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda p: (p[0], -p[1]))
    best = depth = 0
    for _, delta in points:
        depth += delta
        best = max(best, depth)
    return best


def thread_facts(events):
    """Per device: max concurrent threads in a step, distinct threads over all steps; and across devices."""
    spans = {}  # (step, device, thread) -> [first, last]
    for step, device, tid, t in events:
        span = spans.setdefault((step, device, tid), [t, t])
        span[0], span[1] = min(span[0], t), max(span[1], t)
    per_device = {}
    for (step, device, _), _span in spans.items():
        per_device.setdefault(device, {}).setdefault(step, []).append(tuple(_span))
    facts = {"per_device": {}, "steps": len({e[0] for e in events}), "ops_seen": len(events)}
    for device, steps in sorted(per_device.items()):
        facts["per_device"][device] = {
            "max_concurrent_threads": max(max_overlap(s) for s in steps.values()),
            "median_concurrent_threads": statistics.median(max_overlap(s) for s in steps.values()),
            "steps_on_one_thread_at_a_time": sum(max_overlap(s) == 1 for s in steps.values()),
            "threads_per_step_max": max(len(s) for s in steps.values()),
            "distinct_threads": len({tid for (_, d, tid) in spans if d == device}),
        }
    # Across devices: one span per (step, thread) over all devices' ops; the most threads active at once.
    by_step = {}
    for (step, _, tid), (s, e) in spans.items():
        cur = by_step.setdefault(step, {}).setdefault(tid, [s, e])
        cur[0], cur[1] = min(cur[0], s), max(cur[1], e)
    facts["max_concurrent_threads_all_devices"] = max(
        max_overlap(list(map(tuple, t.values()))) for t in by_step.values()
    )
    # Same-thread sharing: in how many steps did one thread run ops of two or more devices.
    owners = {}
    for step, device, tid in spans:
        owners.setdefault((step, tid), set()).add(device)
    shared = len({step for (step, _), devices in owners.items() if len(devices) > 1})
    facts["steps_with_a_thread_running_several_devices"] = shared
    return facts


def trace(devices, inter_op, shape="local", weight="cheap", ops=20, warmup=300, steps=20):
    """Thread attribution for one configuration, from the executor's log (see the module docstring)."""
    spec = dict(
        devices=devices, inter_op=inter_op, shape=shape, weight=weight, ops_list=[ops], warmup=warmup, steps=steps
    )
    _, err = run_worker(spec, log=True)
    events = parse_log(err)
    if not events:
        raise RuntimeError("no executor log lines seen: TF_CPP_VMODULE=executor=1 gave nothing to parse")
    return thread_facts(events)


def per_op_cost(devices, inter_op, shape="local", ops=400, blocks=7, steps=60):
    """Per-op executor cost in microseconds (cheap ops, no logging): median and spread over interleaved blocks."""
    spec = dict(
        devices=devices,
        inter_op=inter_op,
        shape=shape,
        weight="cheap",
        ops_list=[1, ops],
        warmup=300,
        steps=steps,
        blocks=blocks,
    )
    times, _ = run_worker(spec, log=False)
    costs = [(full - base) / (devices * (ops - 1)) * 1e6 for base, full in zip(times["1"], times[str(ops)])]
    step_ms = statistics.median(times[str(ops)]) * 1e3
    return {
        "median_us": statistics.median(costs),
        "min_us": min(costs),
        "max_us": max(costs),
        "blocks": blocks,
        "step_ms": step_ms,
        "ops_per_step": devices * ops,
        "base_step_ms": statistics.median(times["1"]) * 1e3,
    }


def experiment(quick):
    configs = [(1, 1), (1, 2), (2, 1), (2, 2), (4, 2), (4, 4)]
    if quick:
        configs = [(1, 2), (2, 2), (4, 4)]
    rows = []
    for devices, inter_op in configs:
        for shape in ("local", "fanout"):
            for weight in ("cheap", "heavy"):
                if weight == "heavy" and shape == "fanout":
                    continue
                facts = trace(devices, inter_op, shape, weight)
                rows.append(dict(devices=devices, inter_op=inter_op, shape=shape, weight=weight, **facts))
                print(
                    f"  traced devices={devices} inter_op={inter_op} {shape:6s} {weight}: "
                    f"{json.dumps(facts['per_device'])} all={facts['max_concurrent_threads_all_devices']}",
                    file=sys.stderr,
                )
    costs = []
    for devices, inter_op in [(1, 1), (1, 2), (2, 2), (4, 2), (4, 4)] if not quick else [(1, 2), (2, 2)]:
        cost = per_op_cost(devices, inter_op, blocks=3 if quick else 7)
        costs.append(dict(devices=devices, inter_op=inter_op, **cost))
        print(f"  per-op devices={devices} inter_op={inter_op}: {cost}", file=sys.stderr)
    return {"threads": rows, "per_op": costs}


def print_table(doc):
    print("CPU figures (TensorFlow executor on logical CPU devices; this machine's cores are shared)")
    print("Threads: per device, the most threads running that device's ops at one moment (max over steps);")
    print("distinct = threads that ran that device's ops over all steps; all = most threads at once, all devices;")
    print("shared = steps in which one thread ran ops of several devices.")
    print(
        f"{'devices':>7} {'inter_op':>8} {'shape':>6} {'weight':>6} {'per-device at once':>20} "
        f"{'distinct':>10} {'all':>4} {'shared':>7}"
    )
    for r in doc["threads"]:
        at_once = ",".join(str(v["max_concurrent_threads"]) for v in r["per_device"].values())
        distinct = ",".join(str(v["distinct_threads"]) for v in r["per_device"].values())
        print(
            f"{r['devices']:>7} {r['inter_op']:>8} {r['shape']:>6} {r['weight']:>6} {at_once:>20} {distinct:>10} "
            f"{r['max_concurrent_threads_all_devices']:>4} {r['steps_with_a_thread_running_several_devices']:>4}/"
            f"{r['steps']}"
        )
    print("Per-op executor cost, cheap ops, CPU, microseconds: median [min-max] over repeats")
    for c in doc["per_op"]:
        print(
            f"  devices={c['devices']} inter_op={c['inter_op']}: {c['median_us']:.2f} "
            f"[{c['min_us']:.2f}-{c['max_us']:.2f}] over {c['blocks']} blocks; "
            f"step {c['step_ms']:.3f} ms for {c['ops_per_step']} ops, {c['base_step_ms']:.3f} ms for one op per device"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="fewer configurations and repeats")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    doc = experiment(args.quick)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(__doc__.split("\n\n")[0])
        print_table(doc)


if __name__ == "__main__":
    main()
