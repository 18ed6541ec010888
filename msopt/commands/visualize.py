"""The visualize command: a partition drawn as a folded scope graph (SVG, PNG, PDF, DOT) or a self-contained HTML report."""

import click

from msopt.commands import options as opt
from msopt.commands.echo import print_json, progress

EXAMPLE = """\b
Example:
  msopt visualize sample_models/linreg_tf1 -o linreg.svg
  msopt visualize sample_models/towers_tf2 --streams 2 --policy towers -o towers.html \\
      --timeline towers_trace.json
  msopt visualize sample_models/deepfm_tf1 --policy embedding --expand input_layer -o deepfm.png
"""


@click.command(epilog=EXAMPLE)
@opt.MODEL
@click.option(
    "-o",
    "--output",
    default=None,
    help="Picture or report to write (replaced if present): .svg .png .pdf .dot or .html "
    "(default: <model name>.svg here).",
)
@opt.streams(
    None, "Number of streams (default: what the model's _stream_id attributes use; 4 with --policy or --rules)."
)
@opt.policy("Partition on the fly with this rule (default: none, the model's own _stream_id).")
@opt.rules(must_exist=True)
@opt.OVERRIDE
@click.option(
    "--depth",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Name-scope levels drawn open; deeper scopes fold into boxes.",
)
@click.option(
    "--expand",
    multiple=True,
    metavar="SCOPE",
    help="Also open this scope (and the scopes around it); repeat for several.",
)
@opt.SIGNATURE
@opt.TARGET
@opt.BATCH_SIZE
@opt.COSTS
@opt.TIMELINE
@opt.FORCE
@opt.BOUNDARY
@opt.TAGS
@opt.JSON
def visualize(
    model,
    output,
    streams,
    policy,
    rules,
    override,
    depth,
    expand,
    signature,
    target,
    batch_size,
    costs,
    timeline,
    force,
    boundary,
    tags,
    as_json,
):
    """Draw which stream each op of MODEL runs on, folded by name scope so that big models stay readable.

    Draws the computation of one signature: TF2 function calls are opened (a called body
    appears under the call's scope), variable bookkeeping is left out. Name scopes fold into
    boxes coloured by stream (a scope over several streams shows a bar of its shares and how
    many of its inside edges cross streams), edges between boxes are bundled with counts, and
    edges that cross streams are red and dashed.
    A scope with too many members is cut into stages along the data flow. The legend gives
    each stream's colour, op count and share of the simulated time.

    Pictures (.svg .png .pdf) need graphviz's `dot`; without it the .dot file is written and
    the command says how to render it. An .html report is one offline file with the picture,
    the stream table, the simulated speedup and bound, and a Gantt chart of the schedule.
    """
    from msopt.visualize.drawing import draw

    document = draw(
        model,
        output,
        streams,
        policy,
        rules,
        override,
        depth,
        expand,
        signature,
        target,
        batch_size,
        costs,
        timeline,
        boundary,
        tags,
        progress=progress,
        warn=lambda note: click.echo(f"msopt: {note}", err=True),
        force=force,
    )
    for note in document["notes"]:
        click.echo(f"msopt: {note}", err=True)
    if as_json:
        print_json(document)
    else:
        ops, streams = document["ops_shown"], document["streams"]
        click.echo(
            f"wrote {document['output']} ({ops} op{'' if ops == 1 else 's'} of signature "
            f"{document['signature'] or '(whole graph)'}, {streams} stream{'' if streams == 1 else 's'}, "
            f"{document['elapsed_s']} s)"
        )
