"""Real executed steps, from TensorFlow's step statistics: a Chrome trace (one track per device) and per-op costs.

A Session inlines function bodies and names their nodes by the call path (``call/inner_call/op``);
``executed_names`` maps those names back to graph-view keys (``function:op``), so the costs file
speaks the same node keys as every partition. The costs file is ``{"unit": "us", "ops": {key: us}}``.
"""

import json
from collections import defaultdict

import click

from msopt.files.outputs import write_bytes
from msopt.graph.view import MAIN


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
    return name[name.index("/device:") :] if "/device:" in name else name


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
    events += [
        {"ph": "M", "name": "process_sort_index", "pid": pid[d], "tid": 0, "args": {"sort_index": pid[d]}}
        for d in devices
    ]
    for step, md in enumerate(run_metadatas):
        for dev in md.step_stats.dev_stats:
            device = short_device(dev.device)
            for ns in dev.node_stats:
                if ns.node_name == "_SOURCE":
                    continue
                events.append(
                    {
                        "ph": "X",
                        "pid": pid[device],
                        "tid": ns.thread_id,
                        "name": tracer_key(ns.node_name, names) or ns.node_name,
                        "ts": ns.all_start_micros - origin,
                        "dur": max(ns.all_end_rel_micros, 0),
                        "args": {"op": _op_type(ns), "node": ns.node_name, "device": device, "step": step},
                    }
                )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def row_kind(device):
    """What a step-statistics row (DeviceStepStats.device) holds, after TensorFlow's xplane_to_step_stats.cc.

    'device': an executor row ('/job:.../device:GPU:0'): on a CPU the op's compute time, on a GPU
    the time to launch its kernels; 'kernels': '/device:GPU:N/stream:all', every kernel that ran on
    GPU N (N: the CUDA ordinal); 'skip': the same kernels again per stream ('/stream:7'), copies
    ('/memcpy', '/stream:7<MemcpyH2D>'), events of no known stream ('/stream:') and the host's
    cuStreamSynchronize calls ('/sync').
    """
    tail = device.rsplit("/device:", 1)[-1]
    if "/" not in tail:
        return "device"
    return "kernels" if tail.endswith("/stream:all") else "skip"


def tracer_key(node_name, names):
    """The view key of a row's node name: GPU tracer rows say 'name:type' (tf_op_fullname); kernels of no op
    keep the kernel's own name and map to nothing."""
    key = names.get(node_name)
    if key is None and ":" in node_name:
        name, _, op_type = node_name.rpartition(":")
        if op_type.isidentifier():
            key = names.get(name)
    return key


def executed_devices(run_metadata, names):
    """{view key: device it ran on} for the nodes of one traced step that map to the graph view."""
    placed = {}
    for dev in run_metadata.step_stats.dev_stats:
        if row_kind(dev.device) != "device":
            continue  # tracer rows name the physical GPU, not the (virtual) device the op was placed on
        for ns in dev.node_stats:
            key = names.get(ns.node_name)
            if key is not None:
                placed[key] = short_device(dev.device)
    return placed


def op_costs(run_metadatas, names):
    """({view key: mean us per step}, {view key: mean host us per step}, count of executed nodes mapping to no key).

    An op's time is its kernel time: on the CPU its executor row (op start to op end); on a GPU the
    sum of its kernels in the '/stream:all' rows (one op may launch several), because the executor
    row of a GPU op only measures the launch. Those launch times are the host times (second dict).
    A GPU op that launched no kernel (shape arithmetic, host-memory ops) is charged its executor
    row. Nodes that grappler fused or created (e.g. a MatMul+BiasAdd+Relu fusion) are charged to
    the node whose name the result kept.
    """
    device_us, kernel_us, host_us = defaultdict(float), defaultdict(float), defaultdict(float)
    unmapped = set()
    for md in run_metadatas:
        for dev in md.step_stats.dev_stats:
            kind = row_kind(dev.device)
            if kind == "skip":
                continue
            on_gpu = "/device:GPU:" in dev.device
            for ns in dev.node_stats:
                key = tracer_key(ns.node_name, names) if kind == "kernels" else names.get(ns.node_name)
                if key is None:
                    unmapped.add(ns.node_name)
                    continue
                us = max(ns.op_end_rel_micros - ns.op_start_rel_micros, 0)
                if kind == "kernels":
                    kernel_us[key] += us
                else:
                    device_us[key] += us
                    if on_gpu:
                        host_us[key] += us
    steps = max(len(run_metadatas), 1)
    ops = {key: kernel_us.get(key, us) for key, us in device_us.items()}
    ops.update((key, us) for key, us in kernel_us.items() if key not in ops)
    mean = lambda table: {key: round(us / steps, 3) for key, us in sorted(table.items())}  # noqa: E731
    return mean(ops), mean(host_us), len(unmapped - {"_SOURCE"})


def has_kernel_rows(run_metadatas):
    """True when the GPU tracer recorded kernels (it needs CUPTI; without it a GPU profile holds launches only)."""
    return any(row_kind(d.device) == "kernels" for md in run_metadatas for d in md.step_stats.dev_stats)


def costs_document(run_metadatas, names):
    """The costs file: "ops" (what partition --costs reads) and, on a GPU, "host_ops" (launch times)."""
    ops, host, unmapped = op_costs(run_metadatas, names)
    document = {"unit": "us", "steps": len(run_metadatas), "ops": ops}
    if host:
        document["host_ops"] = host
    return document, unmapped


def trace_run(runner, name, feeds, config, progress):
    """--trace/--profile: ``config.trace_steps`` fully traced steps of signature ``name``, written out and summarized."""
    progress(f"tracing {config.trace_steps} steps")
    metadata = runner.traced_steps(name, feeds, config.trace_steps)
    names = executed_names(runner.view)
    placed = executed_devices(metadata[-1], names)
    streams_on = {}
    for key, stream in runner.partition.items():
        if key in placed:
            streams_on.setdefault(str(stream), {}).setdefault(placed[key], 0)
            streams_on[str(stream)][placed[key]] += 1
    result = {"executed": {"nodes_traced": len(placed), "stream_to_device": streams_on}}
    if runner.layout is not None:  # the physical GPU (visible index) behind each stream's devices
        result["executed"]["stream_to_gpu"] = {
            stream: sorted({runner.layout.gpu_of_device(d) for d in devices} - {None})
            for stream, devices in streams_on.items()
        }
    if config.trace_path:
        _write_json(config.trace_path, chrome_trace(metadata, names))
        result["trace"] = config.trace_path
    if config.profile_path:
        costs, unmapped = costs_document(metadata, names)
        _write_json(config.profile_path, costs)
        result["profile"] = {"path": config.profile_path, "ops": len(costs["ops"]), "unmapped_executed_nodes": unmapped}
        if runner.device_type == "gpu" and not has_kernel_rows(metadata):
            result["profile"]["note"] = "no GPU kernel rows (is CUPTI loadable?): GPU ops are charged launch times"
            click.echo(f"msopt: note: {result['profile']['note']}", err=True)
    return result


def _write_json(path, document):
    write_bytes(path, json.dumps(document, indent=2, default=str).encode())
