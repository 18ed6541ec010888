"""The `msopt partition` command: plan, write the rewritten model, report (optionally verified in TensorFlow)."""

import click

from msopt.api import MAX_WARNINGS
from msopt.commands import options as opt
from msopt.commands.echo import print_json, progress
from msopt.errors import VerifyFailed
from msopt.simulator.uncertainty import describe

HELP = f"""Assign every op of MODEL to one of N streams and write the rewritten model.

{opt.policies_block()}

The report (--report, or stdout with --json) holds streams, nodes_per_stream,
cross_stream_edges, functions (per-function breakdown), output, elapsed_s, and
simulated (the figures of `msopt simulate` for this plan on --target at --batch-size).

With --verify the rewritten model is built beside the output and moved there only once
its outputs are bitwise identical to the original's. When verification fails, msopt
exits 1 and writes no model (an output already there stays as it was; the report says
"output": null), so a pipeline never picks up an unverified model.

\b
Example:
  msopt partition sample_models/linreg_tf1 --streams 2 --policy none \\
      --placement device --device-type cpu -o /tmp/linreg_ms2 --verify --json
  printf 'rules:\\n  - scope: tower_1/\\n    stream: 1\\n' > rules.yaml
  msopt partition sample_models/towers_tf1 --streams 2 --rules rules.yaml --verify
"""


@click.command(help=HELP)
@opt.MODEL
@opt.streams()
@opt.policy("Partition rule (see below). Default: auto when available, else none.")
@click.option(
    "--placement",
    type=click.Choice(["attr", "device"]),
    default="attr",
    show_default=True,
    help="attr: write _stream_id only; device: also set each node's device to its stream's device.",
)
@click.option(
    "--device-type",
    type=click.Choice(["gpu", "cpu"]),
    default="gpu",
    show_default=True,
    help="Device kind named by --placement device (/device:GPU:k or /device:CPU:k).",
)
@click.option("-o", "--output", default=None, help="Where to write the model (default: <input>_ms<N> beside it).")
@opt.FORCE
@click.option("--report", type=click.Path(dir_okay=False), default=None, help="Write the JSON report to this file.")
@click.option(
    "--verify",
    is_flag=True,
    help="Run original and rewritten model in TensorFlow; exit 1 unless outputs are "
    "identical. The rewrite reaches the output only once verified: on a failure nothing is written.",
)
@click.option(
    "--inputs",
    "inputs_npz",
    type=click.Path(dir_okay=False),
    default=None,
    help="--verify on the arrays of this .npz (one per signature input) instead of generated inputs.",
)
@click.option(
    "--tolerance",
    type=opt.FiniteFloat(min=0),
    default=None,
    metavar="X",
    help="--verify: accept outputs that differ by at most X (absolute); the report says they are not "
    "bitwise equal. Default: bitwise equality.",
)
@opt.TARGET
@opt.BATCH_SIZE
@opt.COSTS
@opt.HOST_PROFILE
@opt.MERGE_COPY_STREAMS
@opt.rules()
@opt.OVERRIDE
@opt.lanes(
    "Write a K-lane SavedModel instead: serving_default sends call i to lane i mod K (a Case branch pinned "
    "to /device:<--device-type>:k), with TF Serving's platform config beside it. Loads TensorFlow."
)
@click.option(
    "--no-const-dup",
    is_flag=True,
    help="Neither copy nor move Const nodes read on other streams: they stay where the plan put them.",
)
@opt.BOUNDARY
@opt.TAGS
@opt.JSON
def partition(
    model,
    streams,
    policy,
    placement,
    device_type,
    output,
    force,
    report,
    verify,
    inputs_npz,
    tolerance,
    target,
    batch_size,
    costs,
    host_profile,
    merge_copy_streams,
    rules,
    override,
    no_const_dup,
    lanes,
    boundary,
    tags,
    as_json,
):
    from msopt import api

    if lanes is not None:
        if verify:
            from msopt.errors import InputError

            raise InputError("--lanes writes its own model: check it with msopt run --compare-to, not --verify")
        from msopt.lanes.model import write_lanes_model

        document = write_lanes_model(model, lanes, output, device_type, force, tags=tags, report=report)
        if as_json:
            print_json(document)
        else:
            click.echo(f"wrote {document['output']}: {lanes} lanes on {', '.join(document['devices'])}")
            click.echo(f"  TF Serving platform config: {document['platform_config']}; Triton: {document['triton']}")
        return

    try:
        document = api.partition(
            model,
            streams,
            policy,
            output,
            placement=placement,
            device_type=device_type,
            force=force,
            verify=verify,
            inputs=inputs_npz,
            tolerance=tolerance,
            target=target,
            batch_size=batch_size,
            costs=costs,
            host_profile=host_profile,
            merge_copy_streams=merge_copy_streams,
            rules=rules,
            override=override,
            const_dup=not no_const_dup,
            boundary=boundary,
            tags=tags,
            report=report,
            progress=progress,
            warn=lambda line: click.echo(f"msopt: warning: {line}", err=True),
        )
    except VerifyFailed as failed:
        show(failed.document, as_json)
        raise
    show(document, as_json)


def show(document, as_json):
    if as_json:
        print_json(document)
    else:
        click.echo(format_text(document))


def format_text(doc):
    done = f"wrote {doc['output']}" if doc["output"] else "verify failed: wrote nothing"
    lines = [f"{done} ({doc['policy']}, {doc['streams']} streams, {doc['elapsed_s']} s)"]
    lines.append("  nodes per stream: " + ", ".join(f"{i}: {n}" for i, n in enumerate(doc["nodes_per_stream"])))
    lines.append(f"  cross-stream edges: {doc['cross_stream_edges']}; functions: {len(doc['functions'])}")
    kinds = {}
    for merge in doc["constraint_merges"]:
        kinds.setdefault(merge["constraint"], []).append(merge)
    for kind, merges in kinds.items():
        lines.append(
            f"  constraint {kind}: moved {sum(len(m['moved']) for m in merges)} node(s) in {len(merges)} group(s), "
            f"e.g. {merges[0]['moved'][0]} to stream {merges[0]['stream']}"
        )
    if doc["const_copies"]:
        lines.append(
            f"  const copies: {sum(map(len, doc['const_copies'].values()))} of {len(doc['const_copies'])} Const node(s)"
        )
    if doc.get("consts_moved"):
        lines.append(f"  Consts moved to the one stream reading them: {doc['consts_moved']}")
    unmatched = doc.get("unmatched_rules", [])
    for row in unmatched[:MAX_WARNINGS]:
        lines.append(f"  rule {row['rule']} (line {row['line']}) matched no node")
    if len(unmatched) > MAX_WARNINGS:
        lines.append(f"  ... and {len(unmatched) - MAX_WARNINGS} more rules that matched no node")
    sim = doc["simulated"]
    lines.append(
        f"  simulated on {sim['target']}: {sim['makespan_ms']:.4g} ms vs {sim['single_stream_ms']:.4g} ms on one stream "
        f"(speedup {describe(sim['speedup'], sim['speedup_range'])}{'' if sim['robust'] else ', NOT robust'}, "
        f"ratio to bound {sim['ratio_to_bound']:.3g})"
    )
    lines.extend(f"  {note}" for note in doc.get("notes", []))
    if "verify" in doc:
        v = doc["verify"]
        state = "identical" if v.get("identical", v["ok"]) else "DIFFERENT"
        if v["ok"] and state == "DIFFERENT":
            state = f"NOT bitwise equal, accepted by --tolerance {v['tolerance']:g}"
        lines.append(
            f"  verify: outputs {state} on {len(v['signatures'])} signature(s), max abs diff {v['max_abs_diff']:g}"
        )
        for row in v.get("differences", [])[:3]:
            lines.append(f"    {row['node'] + ': ' if row['node'] else ''}{row['why']}")
    return "\n".join(lines)
