"""Replicas against lanes at the same load: both layouts measured one after the other, one report, a verdict.

``msopt run MODEL --compare-layouts --replicas R --lanes K``: R worker processes (under MPS with ``--mps``),
each keeping one request in flight, then K lanes in one process fed by R client threads: the same
concurrency. Each layout reports the same keys: throughput, latency percentiles and memory (on a GPU the
TensorFlow allocator's peak per GPU, summed over processes; always the resident memory of every process,
summed). The verdict names the layout with more records/s, the one with less memory, and the one with
more records/s per GB.
"""

import dataclasses

from msopt.errors import InputError

REFUSED = ("--trace", "--profile", "--save-outputs", "--compare-to", "--stage")


def check_layout_options(config):
    """Refuse what the comparison cannot run, before anything starts; returns the common concurrency (R)."""
    if config.lanes is None:
        raise InputError("--compare-layouts needs --lanes K (the lanes layout to compare with --replicas R)")
    if config.concurrency not in (1, config.replicas):
        raise InputError(
            f"--compare-layouts: each replica keeps one request in flight, so the load is --replicas "
            f"{config.replicas}; --concurrency {config.concurrency} differs (leave it out or give {config.replicas})"
        )
    for flag, value in config.one_process_only:
        if value:
            raise InputError(f"{flag} does not combine with --compare-layouts")
    return config.replicas


def compare_layouts(config, loaded, view, streams, priorities, progress):
    """Run the replicas layout, then the lanes layout, at the same concurrency; the report of both and the verdict."""
    from msopt.lanes.load import run_with_lanes
    from msopt.runner.replicas import run_replicated

    concurrency = check_layout_options(config)
    replicas_config = dataclasses.replace(config, lanes=None, concurrency=1, lane_weights=None, compare_layouts=False)
    lanes_config = dataclasses.replace(
        config, replicas=1, mps=False, mps_threads=None, launcher="local", hosts=None, concurrency=concurrency
    )
    lanes_config = dataclasses.replace(lanes_config, compare_layouts=False)
    progress(f"layout 1 of 2: {config.replicas} replica process(es)")
    replicated = run_replicated(replicas_config, loaded, progress)
    progress(f"layout 2 of 2: {config.lanes} lane(s) in one process, {concurrency} client thread(s)")
    laned = run_with_lanes(lanes_config.with_absolute_paths(), loaded, view, streams, priorities, progress)
    layouts = {"replicas": _replicas_figures(replicated, config), "lanes": _lanes_figures(laned)}
    device_type = laned["device_type"]
    return {
        "model": config.model,
        "signature": laned["signature"],
        "device_type": device_type,
        "figures": "CPU figures: on the CPU these show the mechanism, not a GPU gain"
        if device_type == "cpu"
        else "GPU figures",
        "concurrency": concurrency,
        "batch_size": laned["batch_size"],
        "order": "replicas measured first, then lanes (not interleaved)",
        "layouts": layouts,
        "verdict": verdict(layouts),
    }


def _replicas_figures(doc, config):
    per = doc["per_replica"]
    return _figures(
        layout=f"{doc['replicas']} replica process(es)" + (" under MPS" if config.mps else ""),
        processes=len(per),
        doc=doc,
        memories=[r.get("memory") or {} for r in per],
        extra={"mps": bool(config.mps), "launcher": config.launcher, "per_replica": per},
    )


def _lanes_figures(doc):
    return _figures(
        layout=f"{doc['lanes']} lane(s) in one process",
        processes=1,
        doc=doc,
        memories=[doc.get("memory") or {}],
        extra={"weights": doc["weights"]["mode"], "requests_per_lane": doc["requests_per_lane"]},
    )


def _figures(layout, processes, doc, memories, extra):
    """The keys both layouts share: throughput, latency, memory (summed over processes)."""
    rss = [m.get("peak_rss_mb") for m in memories]
    memory = {
        "rss_mb_sum": round(sum(rss), 1) if rss and None not in rss else None,
        "rss_mb_per_process": rss,
        "label": "peak resident memory (VmHWM) of each process, summed over the layout's processes",
    }
    gpu = [m.get("gpu_peak_mb") for m in memories]
    if any(gpu):
        per_gpu = {}
        for table in gpu:
            for device, mb in (table or {}).items():
                per_gpu[device] = round(per_gpu.get(device, 0.0) + mb, 1)
        memory["gpu_peak_mb_per_gpu"] = per_gpu
        memory["gpu_label"] = "TensorFlow allocator peak per GPU, summed over the processes on it"
    return {
        "layout": layout,
        "processes": processes,
        "steps": doc["steps"],
        "throughput": {k: doc["throughput"][k] for k in ("steps_per_s", "records_per_s")},
        "latency_ms": {k: doc["latency_ms"][k] for k in ("mean", "p50", "p95", "p99")},
        "memory": memory,
        **extra,
    }


def memory_mb(layout):
    """The figure the verdict compares: the largest per-GPU allocator peak on a GPU, else the summed RSS."""
    per_gpu = layout["memory"].get("gpu_peak_mb_per_gpu")
    return max(per_gpu.values()) if per_gpu else layout["memory"]["rss_mb_sum"]


def verdict(layouts):
    """Which layout gave more records/s, which used less memory, and which gave more records/s per GB."""
    names = sorted(layouts)
    speed = {n: layouts[n]["throughput"]["records_per_s"] for n in names}
    memory = {n: memory_mb(layouts[n]) for n in names}
    if None in memory.values():
        return {"more_throughput": max(names, key=speed.get), "less_memory": None, "winner": None}
    per_gb = {n: round(speed[n] / (memory[n] / 1024), 2) for n in names}
    faster, smaller = max(names, key=speed.get), min(names, key=memory.get)
    winner = max(names, key=per_gb.get)
    if faster == smaller:
        reason = f"{faster}: more throughput for less memory"
    else:
        reason = f"{winner}: more records/s per GB of memory ({faster} is faster, {smaller} uses less memory)"
    return {
        "more_throughput": faster,
        "less_memory": smaller,
        "memory_mb": memory,
        "records_per_s": speed,
        "records_per_s_per_gb": per_gb,
        "winner": winner,
        "dominates": faster == smaller,
        "reason": reason,
    }


def text(doc):
    """The comparison as lines for a person."""
    lines = [
        f"{doc['model']}: replicas against lanes at concurrency {doc['concurrency']} "
        f"(batch {doc['batch_size']}, {doc['figures']}; {doc['order']})"
    ]
    for name, f in doc["layouts"].items():
        lat, mem = f["latency_ms"], f["memory"]
        lines.append(
            f"  {name:8} {f['layout']}: {f['throughput']['records_per_s']} records/s; latency ms p50 {lat['p50']}, "
            f"p95 {lat['p95']}, p99 {lat['p99']}; RSS summed {mem['rss_mb_sum']} MB"
            + (f"; GPU peak {mem['gpu_peak_mb_per_gpu']} MB" if mem.get("gpu_peak_mb_per_gpu") else "")
        )
    lines.append(f"  verdict: {doc['verdict'].get('reason') or 'memory not measured here'}")
    return "\n".join(lines)
