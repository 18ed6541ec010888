"""The msopt command line: groups the commands (msopt.commands) and maps errors to exit codes and one-line messages."""

import atexit
import gc
import os
import sys
from importlib import import_module
from inspect import cleandoc

import click

from msopt.errors import CheckFailed, InputError

# Each command lives in its own module, loaded only when run or listed; the first module found wins.
COMMANDS = {
    "inspect": ("msopt.commands.inspect:inspect",),
    "partition": ("msopt.commands.partition:partition",),
    "simulate": ("msopt.commands.simulate:simulate",),
    "visualize": ("msopt.commands.visualize:visualize",),
    "run": ("msopt.commands.run:run",),
    "tune": ("msopt.commands.tune:tune",),
}


def load_command(name):
    """The click command ``name`` from the first of its modules that exists."""
    for target in COMMANDS[name]:
        module, attr = target.split(":")
        try:
            return getattr(import_module(module), attr)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
    raise ModuleNotFoundError(f"no module for command {name}: {', '.join(COMMANDS[name])}")


class Group(click.Group):
    """A click group that maps msopt's errors to exit codes and one-line messages."""

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx, name):
        command = load_command(name) if name in COMMANDS else super().get_command(ctx, name)
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
            fail(
                f"internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} (set MSOPT_DEBUG=1 for a traceback)",
                1,
            )


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
    atexit.unregister(no_final_collection)  # once per process, however often the group runs in it
    atexit.register(no_final_collection)


def no_final_collection():
    """At exit (after the command, its outputs written and closed): freeze every object left, so the interpreter's
    final full collections do not walk them all to free memory the process returns anyway (0.35 s of a 3.5 s
    partition of a 61,000-node model). A process that loaded TensorFlow keeps its usual teardown: its objects'
    finalizers may have work to do."""
    if "tensorflow" not in sys.modules:
        gc.freeze()


if __name__ == "__main__":
    main()
