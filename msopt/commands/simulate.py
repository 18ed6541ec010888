"""The `msopt simulate` command: plan a partition, simulate it on a target GPU, report and draw the timeline."""

import click

from msopt.commands import options as opt
from msopt.commands.echo import print_json, progress
from msopt.simulator.concurrency import describe as describe_load
from msopt.simulator.concurrency import rate
from msopt.simulator.uncertainty import describe


@click.command()
@opt.MODEL
@opt.streams()
@opt.policy("Partition rule, as for `msopt partition` (default: auto when available).")
@opt.TARGET
@opt.BATCH_SIZE
@opt.COSTS
@click.option(
    "--launch-threads",
    type=click.IntRange(1, 256),
    default=None,
    help="Inter-op threads: at most this many stream executors launch at once (default: the target's host's "
    "logical CPUs, TensorFlow's default pool size).",
)
@opt.HOST_PROFILE
@opt.MERGE_COPY_STREAMS
@opt.concurrency(
    "Also simulate this many requests in flight (closed loop) on --lanes lanes of --streams streams: "
    "throughput, latency, a table against concurrency 1-32 and a recommendation."
)
@opt.lanes("Lanes for --concurrency: request i runs on lane i mod K, a virtual GPU of --streams streams (default 1).")
@opt.SIGNATURE
@opt.TIMELINE
@opt.FORCE
@opt.BOUNDARY
@opt.rules()
@opt.OVERRIDE
@opt.TAGS
@opt.JSON
def simulate(
    model,
    streams,
    policy,
    target,
    batch_size,
    costs,
    launch_threads,
    host_profile,
    merge_copy_streams,
    concurrency,
    lanes,
    signature,
    timeline,
    force,
    boundary,
    rules,
    override,
    tags,
    as_json,
):
    """Simulate one run of MODEL on N streams of a GPU and report how much the partition is worth.

    Plans the partition as `msopt partition` would (rule, then constraints), then runs a
    discrete-event simulation: one in-order queue per stream, cross-stream syncs and
    device-to-device copies, kernels sharing the GPU's SMs, and host launch overhead.
    Reports makespan_ms, single_stream_ms, speedup, lower_bound_ms (the largest of the
    critical path, the total work at full GPU, the host's launch time, the kernels' time
    over N serial streams and the cut at a critical op), ratio_to_bound,
    syncs, copies, copy_bytes and stream_busy_ms, each figure with its range over the host
    assumptions (speedup_range, makespan_ms_range) and robust (at least as fast as one stream
    under every one). Writes no model.

    With --concurrency C [--lanes K], also simulates C requests in flight, each issued when
    one completes, request i on lane i mod K (a virtual GPU with the plan's streams), their
    kernels sharing the GPU: requests/s, records/s, latency p50/p95/p99, a table of
    throughput against concurrency 1-32 for 1..K lanes, and the lanes and streams per lane
    to use, robust over the host assumptions (JSON key "load").

    \b
    Example:
      msopt simulate sample_models/towers_tf2 --streams 2 --policy towers --target v100 \\
          --batch-size 32 --timeline /tmp/towers_trace.json --json
      echo '{"launch_us": 2.5, "op_overhead_us": 4}' > host.json
      msopt simulate sample_models/deepfm_tf2 --streams 4 --host-profile host.json
      msopt simulate sample_models/deepfm_tf2 --streams 2 --concurrency 8 --lanes 4 --batch-size 64
    """
    from msopt import api

    document = api.simulate(
        model,
        streams,
        policy,
        target=target,
        batch_size=batch_size,
        costs=costs,
        launch_threads=launch_threads,
        host_profile=host_profile,
        merge_copy_streams=merge_copy_streams,
        signature=signature,
        boundary=boundary,
        rules=rules,
        override=override,
        timeline=timeline,
        tags=tags,
        progress=progress,
        concurrency=concurrency,
        lanes=lanes,
        force=force,
    )
    if as_json:
        print_json(document)
    else:
        click.echo(format_text(document))


def format_text(doc):
    lines = [
        f"{doc['model']}: policy {doc['policy']}, {doc['streams']} streams, {doc['target']}, batch {doc['batch_size']}"
    ]
    lo, hi = doc["makespan_ms_range"]
    lines.append(
        f"  makespan {doc['makespan_ms']:.4g} ms ({lo:.4g}-{hi:.4g}) vs {doc['single_stream_ms']:.4g} ms on one stream: "
        f"speedup {describe(doc['speedup'], doc['speedup_range'])}{'' if doc['robust'] else ', NOT robust'}"
    )
    lines.append(
        f"  lower bound {doc['lower_bound_ms']:.4g} ms (critical path {doc['critical_path_ms']:.4g}, total work "
        f"{doc['total_work_ms']:.4g}, host launches {doc['host_launch_ms']:.4g}); ratio to bound {doc['ratio_to_bound']:.3g}"
    )
    lines.append(f"  syncs {doc['syncs']}, copies {doc['copies']} ({doc['copy_bytes']} bytes)")
    lines.append("  busy per stream (ms): " + ", ".join(f"{i}: {b:.4g}" for i, b in enumerate(doc["stream_busy_ms"])))
    lines.append(
        f"  ops run {doc['ops_run']}, kernels {doc['kernels']}, unknown shapes {doc['ops_with_unknown_shape']}, "
        f"measured {doc['ops_measured']}"
    )
    if "load" in doc:
        lines.extend(format_load(doc["load"]))
    for note in doc["notes"]:
        lines.append(f"  note: {note}")
    if "timeline" in doc:
        lines.append(f"  timeline: {doc['timeline']}")
    return "\n".join(lines)


def format_load(load):
    """The --concurrency lines: the figures, the table (requests/s), the recommendation."""
    batch = load["batch_size"]
    lo, hi = load["requests_per_s_range"]
    latency = ", ".join(f"{q} {load[q + '_ms']:.4g} ms" for q in ("p50", "p95", "p99"))
    lines = [
        f"  load (simulated): concurrency {load['concurrency']} on {load['lanes']} lane(s) x "
        f"{load['streams_per_lane']} stream(s): {describe_load(load, batch)}, {rate(lo)}-{rate(hi)} requests/s "
        f"over the host assumptions; latency {latency}",
        "  requests/s against concurrency (simulated):",
    ]
    concurrencies = sorted({row["concurrency"] for row in load["table"]})
    lines.append("    lanes " + "".join(f"{'C=' + str(c):>10}" for c in concurrencies))
    cells = {(row["lanes"], row["concurrency"]): row["requests_per_s"] for row in load["table"]}
    for k in range(1, load["lanes"] + 1):
        lines.append(f"    {k:>5} " + "".join(f"{cells[(k, c)]:>10,.0f}" for c in concurrencies))
    best = load["recommendation"]
    lo, hi = best["requests_per_s_range"]
    glo, ghi = best["gain_range"]
    lines.append(
        f"  recommendation at concurrency {best['concurrency']}: {best['lanes']} lane(s) x "
        f"{best['streams_per_lane']} stream(s), {rate(best['requests_per_s'])} requests/s ({rate(lo)}-{rate(hi)}), "
        f"{best['gain']:.3g}x one lane of one stream ({glo:.3g}x-{ghi:.3g}x over the host assumptions)"
    )
    if best["note"]:
        lines.append(f"  note: {best['note']}")
    return lines
