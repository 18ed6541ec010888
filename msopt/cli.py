"""The msopt command line: parses, calls, prints. Heavy modules are imported inside commands."""
import json
import os
import sys
import time
from importlib import import_module
from inspect import cleandoc

import click

from msopt.errors import CheckFailed, InputError

# Commands living in their own modules, loaded only when run or listed.
LAZY_COMMANDS = {"run": "msopt.commands.run:run", "simulate": "msopt.simulate_cli:simulate",
                 "visualize": "msopt.visualize_command:visualize"}
MAX_WARNINGS = 10  # unmatched rules listed one by one; the rest are counted


class Group(click.Group):
    """A click group that maps msopt's errors to exit codes and one-line messages."""

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx, name):
        if name in LAZY_COMMANDS:
            module, attr = LAZY_COMMANDS[name].split(":")
            return examples_last(getattr(import_module(module), attr))
        command = super().get_command(ctx, name)
        return examples_last(command) if command else None

    def make_context(self, info_name, args, parent=None, **extra):
        try:  # the group's own options: `msopt --bogus`
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            usage_error(e)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:  # a command's arguments, lazily loaded commands included
            usage_error(e)
        except InputError as e:
            fail(str(e), e.exit_code)
        except CheckFailed as e:
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except OSError as e:
            if e.filename is None or os.environ.get("MSOPT_DEBUG"):
                raise
            fail(f"{e.filename}: {e.strerror or e}", 2)  # a path the user named cannot be read or written
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as e:  # a bug of ours: still one line, traceback on request
            if os.environ.get("MSOPT_DEBUG"):
                raise
            fail(f"internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} (set MSOPT_DEBUG=1 for a traceback)", 1)


def examples_last(command):
    """Move the closing Example block of a command's help after its options, so --help ends with it."""
    text = cleandoc(command.help or "")
    marker = text.find("\b\nExample")
    if command.epilog is None and marker >= 0:
        command.help, command.epilog = text[:marker].rstrip(), text[marker:]
    return command


def usage_error(error):
    """A click usage error as one `msopt: error:` line (click prints a usage block, a hint and the error)."""
    if isinstance(error, getattr(click.exceptions, "NoArgsIsHelpError", ())):
        raise error  # `msopt` alone: click shows the help
    hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
    fail(error.format_message() + hint, error.exit_code)


def fail(message, code):
    """End with one line on stderr: the message's lines are joined."""
    text = "; ".join(line.strip() for line in str(message).splitlines() if line.strip())
    click.echo(f"msopt: error: {text}", err=True)
    sys.exit(code)


def progress(message):
    """A status line on stderr, only when a person watches."""
    if sys.stderr.isatty():
        click.echo(f"msopt: {message}", err=True)


def print_json(document):
    click.echo(json.dumps(document, indent=2, sort_keys=False, default=str))


def write_json(path, document):
    """Write a JSON file whole (replacing it in one step)."""
    from msopt.outputs import write_bytes

    write_bytes(path, json.dumps(document, indent=2, default=str).encode())


def open_model(path, tags=None):
    from msopt.graph import GraphView
    from msopt.load import load

    model = load(path, tags)
    return model, GraphView(model.graph_def)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="msopt")
def main():
    """msopt: run the ops of an exported TensorFlow model on several GPU streams.

    Reads SavedModels (TF1 and TF2/Keras), frozen GraphDefs (.pb, .pbtxt) and
    MetaGraphDefs (.meta); assigns each op a stream (the `_stream_id` attribute of
    DeepRec's tf.stream); writes the rewritten model.

    \b
    Example:
      msopt inspect sample_models/linreg_tf1
      msopt partition sample_models/linreg_tf1 --streams 2 --verify
    """


MODEL = click.argument("model", type=click.Path(path_type=str))
TAGS = click.option("--tags", default=None, help="SavedModel tag set to use, comma-separated (default: serve).")
JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout and nothing else.")


@main.command()
@MODEL
@TAGS
@JSON
def inspect(model, tags, as_json):
    """Show a model's format, tag sets, signatures, sizes, op types, streams and devices.

    Needs only protobuf: the model's ops need not be installed.

    \b
    Example:
      msopt inspect sample_models/deepfm_tf2 --json
    """
    from msopt.inspect import describe, format_text

    loaded, view = open_model(model, tags)
    info = describe(loaded, view)
    click.echo(json.dumps(info, indent=2) if as_json else format_text(info))


def policy_names():
    from msopt.rules import POLICIES

    return list(POLICIES)


def default_policy():
    names = policy_names()
    return "auto" if "auto" in names else "none"


@main.command()
@MODEL
@click.option("--streams", "-n", type=click.IntRange(1, 1024), default=4, show_default=True, help="Number of streams.")
@click.option("--policy", default=None, help="Partition rule (see below). Default: auto when available, else none.")
@click.option("--placement", type=click.Choice(["attr", "device"]), default="attr", show_default=True,
              help="attr: write _stream_id only; device: also set each node's device to its stream's device.")
@click.option("--device-type", type=click.Choice(["gpu", "cpu"]), default="gpu", show_default=True,
              help="Device kind named by --placement device (/device:GPU:k or /device:CPU:k).")
@click.option("-o", "--output", default=None, help="Where to write the model (default: <input>_ms<N> beside it).")
@click.option("--force", is_flag=True, help="Replace an existing output.")
@click.option("--report", type=click.Path(dir_okay=False), default=None, help="Write the JSON report to this file.")
@click.option("--verify", is_flag=True, help="Run original and rewritten model in TensorFlow; exit 1 unless outputs are "
              "identical. The rewrite reaches the output only once verified: on a failure nothing is written.")
@click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False), default=None,
              help="--verify on the arrays of this .npz (one per signature input) instead of generated inputs.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=None, metavar="X",
              help="--verify: accept outputs that differ by at most X (absolute); the report says they are not "
                   "bitwise equal. Default: bitwise equality.")
@click.option("--target", default=None, metavar="GPU", help="GPU profile of the simulated figures: h100, a100, v100, t4 (default h100).")
@click.option("--batch-size", type=int, default=1, show_default=True, help="Unknown batch dimension, for the cost model.")
@click.option("--costs", type=click.Path(dir_okay=False), default=None, help="Measured per-op times (see `msopt simulate --help`).")
@click.option("--rules", type=click.Path(dir_okay=False), default=None, help="YAML rules file for --policy manual (implies it).")
@click.option("--override", is_flag=True, help="Rules win over _stream_id attributes already on the nodes.")
@click.option("--no-const-dup", is_flag=True, help="Do not copy Const nodes into each stream that consumes them.")
@click.option("--boundary", multiple=True, metavar="TENSOR",
              help="--policy stage: the stage is everything upstream of these tensors (repeatable; default: found).")
@TAGS
@JSON
def partition(model, streams, policy, placement, device_type, output, force, report, verify, inputs_npz, tolerance, target,
              batch_size, costs, rules, override, no_const_dup, boundary, tags, as_json):
    """Assign every op of MODEL to one of N streams and write the rewritten model.

    \b
    Policies:
      none   keep the _stream_id attributes already present and check them
      manual a rules file (--rules rules.yaml): regex, scope, op or function -> stream
      auto   (default) cost-aware schedule, the best simulated plan; may use fewer streams
      chains path cover of the graph (Nimble, DeepRec FULL_GRAPH_PARTITION) on N streams
      embedding  each feature's embedding lookup on a stream, balanced by cost
      towers tower_k / replica_k scopes or identical branches, one per stream
      stage  input/preprocessing subgraph on its own stream
      collective NCCL / Collective* / Horovod / Send/Recv ops on their own stream

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
    from msopt import emit
    from msopt.partition import summarize
    from msopt.rules import PartitionOptions, make_plan

    started = time.perf_counter()
    policy = policy or ("manual" if rules else default_policy())
    if rules and policy != "manual":
        raise InputError(f"--rules is read by --policy manual, not by --policy {policy}")
    if tolerance is not None and not verify:
        raise InputError("--tolerance is read by --verify")
    progress(f"loading {model}")
    loaded, view = open_model(model, tags)
    if inputs_npz:
        from msopt.inputs import read_signature_inputs

        if not verify:
            raise InputError("--inputs feeds --verify: add --verify")
        read_signature_inputs(loaded, inputs_npz)  # a bad file fails before anything is written
    out = output or str(emit.default_output(model, streams))
    emit.check_output(loaded, out, force)
    if report and not os.path.isdir(os.path.dirname(os.path.abspath(report))):
        raise InputError(f"{report}: parent directory does not exist")
    progress(f"partitioning {len(view.nodes)} nodes with policy {policy}")
    from msopt.simulate import simulate
    from msopt.simulate_cli import build_cost_model

    cost_model = build_cost_model(view, loaded, target, batch_size, costs)
    options = PartitionOptions(streams=streams, extra={"cost_model": cost_model, "model": loaded, "boundary": list(boundary)}, rules=rules,
                               override=override, const_dup=not no_const_dup)
    plan, merges = make_plan(policy, view, options)
    from msopt.constraints import const_copies

    copies = const_copies(view, plan) if options.const_dup else {}
    unmatched = options.report.get("unmatched_rules", [])
    for row in unmatched[:MAX_WARNINGS]:
        click.echo(f"msopt: warning: rule {row['rule']} ({rules}:{row['line']}) matched no node", err=True)
    if len(unmatched) > MAX_WARNINGS:
        click.echo(f"msopt: warning: ... and {len(unmatched) - MAX_WARNINGS} more rules that matched no node", err=True)
    verified = {}

    def check(built):  # with --verify: the rewrite reaches the output only once verified
        from msopt.load import load
        from msopt.verify import verify as run_verify

        verified["elapsed_s"] = round(time.perf_counter() - started, 3)
        progress("verifying in TensorFlow")
        result = verified["verify"] = run_verify(loaded, load(built, tags), streams, device_type,
                                                 inputs_npz=inputs_npz and os.path.abspath(inputs_npz), tolerance=tolerance)
        if result.get("error"):
            result["error"] = result["error"].replace(str(built), out)
        return result["ok"]

    progress(f"writing {out}")
    written = emit.write(loaded, plan, out, placement, device_type, force, const_copies=copies, check=check if verify else None)
    document = {"model": model, "policy": policy, **summarize(view, plan, streams), "placement": placement,
                "constraint_merges": merges, "const_copies": copies, **options.report, "output": written and out,
                "elapsed_s": verified.pop("elapsed_s", round(time.perf_counter() - started, 3))}
    document["simulated"] = simulate(view, plan, streams, cost_model).report()
    document.update(verified)
    if report:
        write_json(report, document)
    if as_json:
        print_json(document)
    else:
        click.echo(_partition_text(document))
    if verify and not document["verify"]["ok"]:
        result = document["verify"]
        why = next((f"; {d['node']}: {d['why']}" if d["node"] else f"; {d['why']}" for d in result.get("differences", [])), "")
        limit = f", more than --tolerance {tolerance:g}" if tolerance is not None else ""
        cause = result.get("error") or f"rewritten model differs from the original (max abs diff {result['max_abs_diff']:g}{limit}){why}"
        raise CheckFailed(f"{cause}; nothing written to {out}")


def _partition_text(doc):
    done = f"wrote {doc['output']}" if doc["output"] else "verify failed: wrote nothing"
    lines = [f"{done} ({doc['policy']}, {doc['streams']} streams, {doc['elapsed_s']} s)"]
    lines.append("  nodes per stream: " + ", ".join(f"{i}: {n}" for i, n in enumerate(doc["nodes_per_stream"])))
    lines.append(f"  cross-stream edges: {doc['cross_stream_edges']}; functions: {len(doc['functions'])}")
    kinds = {}
    for merge in doc["constraint_merges"]:
        kinds.setdefault(merge["constraint"], []).append(merge)
    for kind, merges in kinds.items():
        lines.append(f"  constraint {kind}: moved {sum(len(m['moved']) for m in merges)} node(s) in {len(merges)} group(s), "
                     f"e.g. {merges[0]['moved'][0]} to stream {merges[0]['stream']}")
    if doc["const_copies"]:
        lines.append(f"  const copies: {sum(map(len, doc['const_copies'].values()))} of {len(doc['const_copies'])} Const node(s)")
    unmatched = doc.get("unmatched_rules", [])
    for row in unmatched[:MAX_WARNINGS]:
        lines.append(f"  rule {row['rule']} (line {row['line']}) matched no node")
    if len(unmatched) > MAX_WARNINGS:
        lines.append(f"  ... and {len(unmatched) - MAX_WARNINGS} more rules that matched no node")
    sim = doc["simulated"]
    lines.append(f"  simulated on {sim['target']}: {sim['makespan_ms']:.4g} ms vs {sim['single_stream_ms']:.4g} ms on one stream "
                 f"(speedup {sim['speedup']:.3g}x, ratio to bound {sim['ratio_to_bound']:.3g})")
    lines.extend(f"  {note}" for note in doc.get("notes", []))
    if "verify" in doc:
        v = doc["verify"]
        state = "identical" if v.get("identical", v["ok"]) else "DIFFERENT"
        if v["ok"] and state == "DIFFERENT":
            state = f"NOT bitwise equal, accepted by --tolerance {v['tolerance']:g}"
        lines.append(f"  verify: outputs {state} on {len(v['signatures'])} signature(s), max abs diff {v['max_abs_diff']:g}")
        for row in v.get("differences", [])[:3]:
            lines.append(f"    {row['node'] + ': ' if row['node'] else ''}{row['why']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
