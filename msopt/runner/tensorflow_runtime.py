"""TensorFlow imported quietly: its start-up and runtime logs held back, its errors told in one line.

TensorFlow is imported here, inside functions, and nowhere on the proto-only paths.
"""

import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import warnings

from msopt.errors import held, interrupted

_held: list[int] = []  # the terminal's fd once TensorFlow's runtime logs are held back (once per process)


@contextlib.contextmanager
def quiet_native_stderr():
    """Hold back what TensorFlow's C++ runtime prints at start-up (absl logs ignore
    TF_CPP_MIN_LOG_LEVEL before initialization); replay it on failure or with MSOPT_DEBUG."""
    if os.environ.get("MSOPT_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held_file:
        os.dup2(held_file.fileno(), 2)
        try:
            yield
        except BaseException as e:
            with held():
                os.dup2(saved, 2)
            if not isinstance(e, KeyboardInterrupt) and interrupted() is None:  # an interrupt says one line only
                held_file.seek(0)
                sys.stderr.write(held_file.read().decode(errors="replace"))
            raise
        finally:
            with held():  # the line an interrupt ends with goes to the terminal, not to this file
                os.dup2(saved, 2)
                os.close(saved)


def import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with quiet_native_stderr():
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        tf.config.list_physical_devices()  # initializes the platforms (and their start-up logs)
    hold_runtime_logs()
    return tf


def hold_runtime_logs():
    """Keep TensorFlow's own log lines (C++ runtime, absl, Python warnings) off the user's stderr for the rest
    of the process, unless MSOPT_DEBUG is set: fd 2 goes to /dev/null and Python's sys.stderr keeps the
    terminal. Only when sys.stderr is this process's fd 2 (not under a test harness that captured it)."""
    if os.environ.get("MSOPT_DEBUG") or _held:
        return
    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(tensorflow|tf_keras|keras|absl)(\.|$)")
    try:
        if sys.stderr.fileno() != 2:
            return
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    sys.stderr = io.TextIOWrapper(
        os.fdopen(terminal, "wb", buffering=0),
        encoding=sys.stderr.encoding or "utf-8",
        errors="backslashreplace",
        line_buffering=True,
        write_through=True,
    )
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    _held.append(terminal)


NOISE = re.compile(
    r"^(Graph execution error:|Detected at node|Node: |File |<stack traces unavailable>|"
    r"Original stack trace|\d+ root error\(s\) found|\d+ successful operations|"
    r"\d+ derived errors ignored|Additional GRPC error information)"
)


def error_line(error):
    """One line from a TensorFlow error: the node and the reason TensorFlow gives, not its first line.

    TensorFlow's runtime errors read "Graph execution error:", then where the node was defined,
    then the reason, then ``[[{{node NAME}}]]``: the reason is the line before that marker.
    """
    text = str(getattr(error, "message", None) or error).strip()
    node = re.search(r"\[\[\{\{node ([^}]+)\}\}", text) or re.search(r"Detected at node '?([^'\s]+)'?", text)
    lines = [line.strip() for line in text.splitlines()]
    marker = next((i for i, line in enumerate(lines) if "[[{{node" in line), len(lines))
    reason = ""
    for line in reversed(lines[: marker + 1]):
        line = re.sub(r"\s*\[\[\{\{node [^}]+\}\}\]\].*$", "", line).strip()
        line = re.sub(r"^\(\d+\) [A-Z_]+: ", "", line)
        if line and not NOISE.match(line):
            reason = line
            break
    reason = reason or next((line for line in lines if line and not NOISE.match(line)), "") or type(error).__name__
    reason = reason[:300]
    if node and node.group(1) not in reason:
        return f"node '{node.group(1)}': {reason}"
    return reason
