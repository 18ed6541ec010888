"""The `msopt inspect` command: a model's format, signatures, sizes, op types, streams and devices."""

import json

import click

from msopt.commands.options import JSON, MODEL, TAGS


@click.command()
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
    from msopt.api import inspect as describe
    from msopt.graph.contents import format_text

    info = describe(model, tags=tags)
    click.echo(json.dumps(info, indent=2) if as_json else format_text(info))
