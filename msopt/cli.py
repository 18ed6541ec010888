"""The msopt command line: groups the commands (msopt.commands) and maps errors to exit codes and one-line messages."""

import atexit
import contextlib
import gc
import os
import sys
import threading
from importlib import import_module
from inspect import cleandoc

import click

from msopt import errors
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

    def __call__(self, *args, **kwargs):
        """As the program (``python -m msopt``, the ``msopt`` script), SIGINT, SIGTERM and SIGHUP end the command
        as an interrupt from the start until the process exits, its end included, always with one line. Other
        callers (a script that catches SystemExit, click's test runner) get the command's handlers only."""
        if not is_program():
            return self.main(*args, **kwargs)
        errors.signals_interrupt_for_good()
        try:
            try:
                return self.main(*args, **kwargs)
            except KeyboardInterrupt as e:  # before click parsed anything
                fail("interrupted", errors.exit_code(e))
        except SystemExit as e:
            exit_process(e.code)
            raise

    def make_context(self, info_name, args, parent=None, **extra):
        try:  # the group's own options: `msopt --bogus`
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            usage_error(e)
        except KeyboardInterrupt as e:  # click would print "Aborted!"
            fail("interrupted", errors.exit_code(e))

    def invoke(self, ctx):
        with errors.signals_interrupt():  # in-process callers: for the command only
            try:
                try:
                    result = super().invoke(ctx)
                except (click.exceptions.Exit, click.exceptions.Abort):
                    raise
                except Exception as e:
                    if errors.interrupted():  # an interrupt that surfaced as another error: an interrupted
                        raise errors.Interrupted(errors.interrupted()) from None  # import, TensorFlow's ValueError
                    report(e)
                if errors.interrupted():  # an interrupt something swallowed on the way: the outputs are whole
                    raise errors.Interrupted(errors.interrupted())
                return result
            except KeyboardInterrupt as e:  # raised where it landed, or while another error was being reported
                fail("interrupted", errors.exit_code(e))
            finally:
                errors.ending()  # a signal from now on (click's exit, the interpreter's teardown) ends the process


def report(error):
    """End with the one line (and exit code) of an error that is not an interrupt (called while handling it)."""
    if isinstance(error, click.UsageError):  # a command's arguments, lazily loaded commands included
        usage_error(error)
    if isinstance(error, (InputError, CheckFailed)):
        fail(str(error), error.exit_code)
    debug = os.environ.get("MSOPT_DEBUG")
    if isinstance(error, OSError) and error.filename is not None and not debug:
        fail(f"{error.filename}: {error.strerror or error}", 2)  # a path the user named cannot be read or written
    if isinstance(error, (click.ClickException, OSError)) or debug:  # click reports its own; a traceback on request
        raise error
    message = str(error).splitlines()[0] if str(error) else ""
    fail(f"internal error: {type(error).__name__}: {message} (set MSOPT_DEBUG=1 for a traceback)", 1)


def is_program():
    """Whether this process is msopt's command line: run as ``python -m msopt``, or as the ``msopt`` script."""
    program = sys.modules.get("__main__")
    spec = getattr(program, "__spec__", None)
    if spec is not None:
        return spec.name == "msopt.__main__"
    return os.path.basename(getattr(program, "__file__", None) or "") == "msopt"


def exit_process(code):
    """End the process with ``code`` (a SystemExit's) once the atexit callbacks ran, without the interpreter's
    teardown: Python stops handling signals at its start (``_PySignal_Fini``), and destroying the modules of
    numba, scipy or TensorFlow takes long enough for a SIGTERM to kill msopt silently, or a SIGINT to end it with
    no line, after its outputs were written. The callbacks run with msopt's handlers still in place; everything
    the commands write is closed by then. An MPI rank keeps the full teardown: mpi4py ends MPI there."""
    from msopt.runner.mpi_launcher import is_rank

    if is_rank() or threading.current_thread() is not threading.main_thread():
        return
    if errors.interrupted():  # an interrupted import can leave callbacks that fail: the one line says it all
        sys.unraisablehook = lambda unraisable: None
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:  # what the interpreter does first: join the threads that are not daemons
        shutdown()
    atexit._run_exitfuncs()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"), as the interpreter would print it
        with contextlib.suppress(Exception):
            print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(errors.exit_status(status) & 0xFF)


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
    errors.ending(code)  # first: a signal meanwhile must neither raise nor add a line
    click.echo(f"{errors.fresh_line(sys.stderr)}msopt: error: {text}", err=True)
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
    finalizers may have work to do. (The program itself skips the teardown, see ``exit_process``; this serves the
    callers that keep it: a script calling ``main``, an MPI rank.)"""
    if "tensorflow" not in sys.modules:
        gc.freeze()


if __name__ == "__main__":
    main()
