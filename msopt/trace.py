"""Real executed steps, from TensorFlow's step statistics: a Chrome trace (one track per device) and per-op costs.

A Session inlines function bodies and names their nodes by the call path (``call/inner_call/op``);
``executed_names`` maps those names back to graph-view keys (``function:op``), so the costs file
speaks the same node keys as every partition. The costs file is ``{"unit": "us", "ops": {key: us}}``.
"""
from collections import defaultdict

from msopt.graph import MAIN


def executed_names(view, root=MAIN):
    """{name a Session gives an executed node: view key}, following function calls from ``root``.

    ``root`` a function name: the names a frozen copy of that function has (its calls inlined).
    """
    by_function = defaultdict(list)
    for node in view.real_nodes():
        by_function[node.function].append(node)
    names = {}
    pending = [(root, "", 0)]
    while pending:
        function, prefix, depth = pending.pop()
        for node in by_function.get(function, ()):
            names.setdefault(prefix + node.name, node.key)
            if depth < 64:
                pending.extend((fn, f"{prefix}{node.name}/", depth + 1) for fn in node.calls)
    return names


def short_device(name):
    """'/job:localhost/replica:0/task:0/device:CPU:1' -> '/device:CPU:1' (other entries kept as they are)."""
    return name[name.index("/device:"):] if "/device:" in name else name


def _op_type(node_stats):
    label = node_stats.timeline_label
    if " = " in label:
        return label.split(" = ", 1)[1].split("(", 1)[0]
    return ""


def chrome_trace(run_metadatas, names):
    """Chrome trace-event JSON of the traced steps: one process (track group) per device, one row per thread."""
    starts = [ns.all_start_micros for md in run_metadatas for d in md.step_stats.dev_stats for ns in d.node_stats]
    origin = min(starts, default=0)
    devices = sorted({short_device(d.device) for md in run_metadatas for d in md.step_stats.dev_stats})
    pid = {device: k for k, device in enumerate(devices)}
    events = [{"ph": "M", "name": "process_name", "pid": pid[d], "tid": 0, "args": {"name": d}} for d in devices]
    events += [{"ph": "M", "name": "process_sort_index", "pid": pid[d], "tid": 0, "args": {"sort_index": pid[d]}}
               for d in devices]
    for step, md in enumerate(run_metadatas):
        for dev in md.step_stats.dev_stats:
            device = short_device(dev.device)
            for ns in dev.node_stats:
                if ns.node_name == "_SOURCE":
                    continue
                events.append({
                    "ph": "X", "pid": pid[device], "tid": ns.thread_id, "name": names.get(ns.node_name, ns.node_name),
                    "ts": ns.all_start_micros - origin, "dur": max(ns.all_end_rel_micros, 0),
                    "args": {"op": _op_type(ns), "node": ns.node_name, "device": device, "step": step},
                })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def executed_devices(run_metadata, names):
    """{view key: device it ran on} for the nodes of one traced step that map to the graph view."""
    placed = {}
    for dev in run_metadata.step_stats.dev_stats:
        for ns in dev.node_stats:
            key = names.get(ns.node_name)
            if key is not None:
                placed[key] = short_device(dev.device)
    return placed


def op_costs(run_metadatas, names):
    """({view key: mean microseconds per step}, count of executed nodes that map to no view key).

    A node's time is its kernel time (op start to op end); nodes that grappler fused or created
    (e.g. a MatMul+BiasAdd+Relu fusion) are charged to the node whose name the result kept.
    """
    total = defaultdict(float)
    unmapped = set()
    for md in run_metadatas:
        for dev in md.step_stats.dev_stats:
            if "/stream:" in dev.device or "/memcpy" in dev.device:
                continue  # GPU tracer rows repeat the ops of their device; count each op once
            for ns in dev.node_stats:
                key = names.get(ns.node_name)
                if key is None:
                    unmapped.add(ns.node_name)
                    continue
                total[key] += max(ns.op_end_rel_micros - ns.op_start_rel_micros, 0)
    steps = max(len(run_metadatas), 1)
    return {key: round(us / steps, 3) for key, us in sorted(total.items())}, len(unmapped - {"_SOURCE"})


def costs_document(run_metadatas, names):
    ops, unmapped = op_costs(run_metadatas, names)
    return {"unit": "us", "steps": len(run_metadatas), "ops": ops}, unmapped
