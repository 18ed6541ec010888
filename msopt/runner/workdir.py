"""A private place to run models in: what a graph writes or logs never lands in the user's directory or terminal.

A graph may hold ops that write files at relative paths (a TF1 Saver's save op writes ``model.index``
and ``model.data-*`` to the current directory). While msopt runs a model, the process works in a
temporary directory of its own, removed afterwards; paths the user gave must be absolute by then.
TensorFlow's native log lines (grappler's ``E0000 ... meta_optimizer.cc`` and the like) are held back
too, unless MSOPT_DEBUG is set: msopt reports failures itself, in one line.
"""

import contextlib
import functools
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from msopt.errors import held


@contextlib.contextmanager
def private_cwd():
    """Work in a fresh temporary directory; go back and remove it on exit."""
    previous = os.getcwd()
    path = None
    try:
        with held():  # an interrupt inside mkdtemp would leave the folder unnamed, so never removed
            path = tempfile.mkdtemp(prefix="msopt-cwd-")
        os.chdir(path)
        yield Path(path)
    finally:
        with held():  # a first signal landing here waits until the folder is gone
            os.chdir(previous)
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def held_native_stderr():
    """Send what is written to file descriptor 2 to a discarded file (left alone with MSOPT_DEBUG)."""
    if os.environ.get("MSOPT_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held_file:
            os.dup2(held_file.fileno(), 2)
            try:
                yield
            finally:
                with held():  # the line an interrupt ends with goes to the terminal, not to this file
                    sys.stderr.flush()
                    os.dup2(saved, 2)
    finally:
        os.close(saved)


def absolute(value):
    """A model or path made absolute (to be found from another working directory); anything else as is."""
    from msopt.load import Model

    if isinstance(value, Model):
        return value if Path(value.path).is_absolute() else replace(value, path=Path(value.path).absolute())
    if isinstance(value, os.PathLike):
        return type(value)(os.path.abspath(value)) if isinstance(value, Path) else os.path.abspath(value)
    return value


def runs_models(function):
    """Decorate ``function`` to run in a private working directory with TensorFlow's log held back,
    its model and path arguments made absolute."""

    @functools.wraps(function)
    def in_private_cwd(*args, **kwargs):
        from msopt.runner.tensorflow_runtime import import_tensorflow

        import_tensorflow()  # first: it keeps the terminal for sys.stderr, so it must see fd 2 not yet held back
        args = [absolute(a) for a in args]
        kwargs = {k: absolute(v) for k, v in kwargs.items()}
        with private_cwd(), held_native_stderr():
            return function(*args, **kwargs)

    return in_private_cwd
