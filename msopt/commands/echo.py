"""What the commands print: status lines on stderr, JSON documents on stdout or in files."""

import json
import sys

import click


def progress(message):
    """A status line on stderr, only when a person watches."""
    if sys.stderr.isatty():
        click.echo(f"msopt: {message}", err=True)


def print_json(document):
    click.echo(json.dumps(document, indent=2, sort_keys=False, default=str))


def write_json(path, document):
    """Write a JSON file whole (replacing it in one step)."""
    from msopt.files.outputs import write_bytes

    write_bytes(path, json.dumps(document, indent=2, default=str).encode())
