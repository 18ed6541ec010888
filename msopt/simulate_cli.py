"""The `msopt simulate` command: plan a partition, simulate it on a target GPU, report and draw the timeline."""
import time

import click

from msopt.cli import JSON, MODEL, TAGS, default_policy, open_model, print_json, progress, write_json

TARGET = click.option("--target", default=None, metavar="GPU",
                      help="GPU profile: h100, a100, v100 or t4 (default: h100).")
BATCH_SIZE = click.option("--batch-size", type=int, default=1, show_default=True,
                          help="Size of the unknown batch dimension of the inputs.")
COSTS = click.option("--costs", type=click.Path(dir_okay=False), default=None,
                     help='Measured per-op times, JSON {"unit": "us", "ops": {"<node key>": time}}; they replace the model\'s.')


def build_cost_model(view, loaded, target, batch_size, costs, signature=None, launch_threads=None):
    """The cost model the commands share (bad targets, batch sizes and costs files are InputErrors)."""
    from dataclasses import replace

    from msopt.cost import DEFAULT_TARGET, TARGETS, CostModel
    from msopt.errors import InputError

    if batch_size is not None and batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {batch_size}")
    target = target or DEFAULT_TARGET
    if launch_threads is not None:
        if target not in TARGETS:
            raise InputError(f"unknown target '{target}'; choose one of: {', '.join(TARGETS)}")
        target = replace(TARGETS[target], launch_threads=launch_threads)
    return CostModel(view, loaded, target=target, batch_size=batch_size or 1, costs=costs, signature=signature)


def plan_options(streams, cost_model, loaded):
    """PartitionOptions carrying the cost model, so a cost-aware rule simulates with the same one."""
    from msopt.rules import PartitionOptions

    extra = {"cost_model": cost_model, "model": loaded, "target": cost_model.target.name,
             "batch_size": cost_model.batch_size}
    return PartitionOptions(streams=streams, extra=extra)


@click.command()
@MODEL
@click.option("--streams", "-n", type=click.IntRange(1, 1024), default=4, show_default=True, help="Number of streams.")
@click.option("--policy", default=None, help="Partition rule, as for `msopt partition` (default: auto when available).")
@TARGET
@BATCH_SIZE
@COSTS
@click.option("--launch-threads", type=click.IntRange(1, 256), default=None,
              help="Host threads launching kernels at once (default 1: TensorFlow's launches mostly serialize).")
@click.option("--signature", default=None, help="Signature whose run is simulated (default: serving_default or the first).")
@click.option("--timeline", type=click.Path(dir_okay=False), default=None,
              help="Write the simulated schedule as Chrome trace-event JSON (open it in Perfetto or chrome://tracing).")
@TAGS
@JSON
def simulate(model, streams, policy, target, batch_size, costs, launch_threads, signature, timeline, tags, as_json):
    """Simulate one run of MODEL on N streams of a GPU and report how much the partition is worth.

    Plans the partition as `msopt partition` would (rule, then constraints), then runs a
    discrete-event simulation: one in-order queue per stream, cross-stream syncs and
    device-to-device copies, kernels sharing the GPU's SMs, and host launch overhead.
    Reports makespan_ms, single_stream_ms, speedup, lower_bound_ms (the largest of the
    critical path, the total work at full GPU and the host's launch time), ratio_to_bound,
    syncs, copies, copy_bytes and stream_busy_ms. Writes no model.

    \b
    Example:
      msopt simulate sample_models/towers_tf2 --streams 2 --policy towers --target v100 \\
          --batch-size 32 --timeline /tmp/towers_trace.json --json
    """
    from msopt.rules import make_plan
    from msopt.simulate import simulate as run_simulation

    started = time.perf_counter()
    policy = policy or default_policy()
    progress(f"loading {model}")
    loaded, view = open_model(model, tags)
    cost_model = build_cost_model(view, loaded, target, batch_size, costs, signature, launch_threads)
    progress(f"partitioning with policy {policy}")
    options = plan_options(streams, cost_model, loaded)
    plan, merges = make_plan(policy, view, options)
    progress(f"simulating {len(cost_model)} ops")
    result = run_simulation(view, plan, streams, cost_model)
    document = {"model": model, "policy": policy, **result.report(), "constraint_merges": len(merges),
                "notes": list(getattr(options, "notes", []) or []), "elapsed_s": round(time.perf_counter() - started, 3)}
    if timeline:
        from msopt.timeline import chrome_trace

        write_json(timeline, chrome_trace(result))
        document["timeline"] = timeline
    if as_json:
        print_json(document)
    else:
        click.echo(format_text(document))


def format_text(doc):
    lines = [f"{doc['model']}: policy {doc['policy']}, {doc['streams']} streams, {doc['target']}, batch {doc['batch_size']}"]
    lines.append(f"  makespan {doc['makespan_ms']:.4g} ms vs {doc['single_stream_ms']:.4g} ms on one stream "
                 f"(speedup {doc['speedup']:.3g}x)")
    lines.append(f"  lower bound {doc['lower_bound_ms']:.4g} ms (critical path {doc['critical_path_ms']:.4g}, total work "
                 f"{doc['total_work_ms']:.4g}, host launches {doc['host_launch_ms']:.4g}); ratio to bound {doc['ratio_to_bound']:.3g}")
    lines.append(f"  syncs {doc['syncs']}, copies {doc['copies']} ({doc['copy_bytes']} bytes)")
    lines.append("  busy per stream (ms): " + ", ".join(f"{i}: {b:.4g}" for i, b in enumerate(doc["stream_busy_ms"])))
    lines.append(f"  ops run {doc['ops_run']}, kernels {doc['kernels']}, unknown shapes {doc['ops_with_unknown_shape']}, "
                 f"measured {doc['ops_measured']}")
    for note in doc["notes"]:
        lines.append(f"  note: {note}")
    if "timeline" in doc:
        lines.append(f"  timeline: {doc['timeline']}")
    return "\n".join(lines)
