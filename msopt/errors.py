"""The ways a command ends early: bad input (exit 2), a failed check (exit 1) and a signal (exit 128 + its number).

A signal (SIGINT, SIGTERM, SIGHUP) becomes ``Interrupted``, raised in the main thread, so that ``finally`` blocks
and context managers remove temporary folders and stop child processes as they do for Ctrl-C (a SIGTERM left to
its default action kills the process before any of them runs). Code that catches broad exceptions asks
``interrupted()`` first: an interrupt that lands inside an import, or inside TensorFlow, often surfaces as another
error (an ImportError, a ValueError) and must still end the command as an interrupt.
"""

import contextlib
import os
import signal
import sys
import threading


class InputError(Exception):
    """The user's input cannot be used: the message is one line naming the problem."""

    exit_code = 2


class CheckFailed(Exception):
    """A verification or check ran and failed."""

    exit_code = 1


class VerifyFailed(CheckFailed):
    """The rewritten model's outputs differ from the original's: ``document`` is the partition report."""

    def __init__(self, message, document):
        super().__init__(message)
        self.document = document


class Interrupted(KeyboardInterrupt):
    """A signal asked msopt to stop. A KeyboardInterrupt, so ``except Exception`` does not swallow it and code
    that stops cleanly on Ctrl-C does on SIGTERM too."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
FORCE_AFTER = 2  # signals let pass while the first one's cleanup runs; the next one ends the process at once


class _State:
    received = None  # the first signal received (its number gives the exit code)
    armed = True  # whether the next signal raises (False from the first until ``rearm``)
    held = 0  # depth of ``held()`` blocks: signals wait for their end
    deferred = False  # a signal came during a held block
    ignored = 0  # signals let pass since the first one
    ending = False  # the command has ended: a signal no longer raises (see ``_on_signal``)
    code = None  # the exit status chosen when its one line was written (None: no line yet)


def reset():
    """A fresh command (in-process callers run several): nothing received, the next signal raises."""
    _State.received, _State.armed, _State.held, _State.deferred = None, True, 0, False
    _State.ignored, _State.ending, _State.code = 0, False, None


def interrupted():
    """The number of the first signal msopt's handler received during this command, or None."""
    return _State.received


def check_interrupted():
    """Raise ``Interrupted`` when a signal was received: after catching an error that may be an interrupt in
    disguise, the interrupt wins."""
    if _State.received is not None:
        raise Interrupted(_State.received)


def exit_code(error=None):
    """The exit status of an interrupt: 128 + its signal (the error's, else the first received), else 130."""
    return 128 + (getattr(error, "signum", None) or _State.received or signal.SIGINT)


def rearm():
    """The caller handled the interrupt (tune's rounds stop, and it writes what they measured): the next signal
    raises again."""
    _State.armed, _State.ignored = True, 0


def ending(code=None):
    """The command has ended: a signal from now on must not raise (that would break the exit). ``code``: its one
    line is on stderr, with this exit status."""
    _State.ending = True
    if code is not None:
        _State.code = code


def fresh_line(stream):
    """What starts the last line on a terminal: a progress bar an interrupt cut short leaves its line unfinished
    and the cursor hidden, so show the cursor and clear that line first."""
    try:
        return "\x1b[?25h\x1b[2K\r" if stream.isatty() else ""
    except (AttributeError, OSError, ValueError):
        return ""


def _finish(code, _state=_State, _exit=os._exit, _sys=sys, _suppress=contextlib.suppress, _fresh=fresh_line):
    """End the process now: the one line unless written, then exit ``code`` (no cleanup: the command is over,
    or its cleanup hangs)."""
    if _state.code is None:
        _state.code = code
        with _suppress(Exception):
            _sys.stdout.flush()
            _sys.stderr.write(f"{_fresh(_sys.stderr)}msopt: error: interrupted\n")
            _sys.stderr.flush()
    _exit(_state.code)


def _on_signal(signum, frame, _state=_State, _finish=_finish):
    # Defaults bind what the handler needs: it may run during interpreter shutdown, when globals are cleared.
    if _state.received is None:
        _state.received = signum
    if _state.ending and _state.code is None:  # the command succeeded a moment ago: interrupted all the same
        _finish(128 + _state.received)
    if not _state.ending and _state.armed:
        if not _state.held:
            _state.armed = False
            raise Interrupted(_state.received)
        if not _state.deferred:
            _state.deferred = True  # raised at the end of the held block
            return
    _state.ignored += 1  # a second Ctrl-C must not break the cleanup the first one started...
    if _state.ignored > FORCE_AFTER:  # ...unless that hangs, or something swallowed the interrupt
        _finish(128 + _state.received)


def exit_status(status, names=STOP_SIGNALS):
    """The status to end the process with, its last Python step done: from here to the exit, the signals
    ``names`` are blocked in this thread, and one that came meanwhile (still pending, or handled just now as
    these lines run) ends it as an interrupt, with its line."""
    stop = {getattr(signal, name) for name in names if hasattr(signal, name)}
    if not hasattr(signal, "pthread_sigmask"):  # not a POSIX system
        return status
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    pending = stop & signal.sigpending()
    if pending and _State.code is None:
        _State.received = _State.received or min(pending)
        _finish(128 + _State.received)
    return status


def _is_default(handler, name):
    return handler == signal.SIG_DFL or (name == "SIGINT" and handler is signal.default_int_handler)


def _install(names):
    """msopt's handler for each of the signals ``names`` left to its default action; returns the handlers
    replaced. An ignored signal stays ignored (a shell's background job, nohup), a handler someone else installed
    stays theirs, and outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in names:
        number = getattr(signal, name, None)
        if number is not None and _is_default(signal.getsignal(number), name):
            previous[number] = signal.getsignal(number)
    if previous:
        reset()
        for number in previous:
            signal.signal(number, _on_signal)
    return previous


@contextlib.contextmanager
def signals_interrupt(names=STOP_SIGNALS):
    """While the block runs, the signals ``names`` raise ``Interrupted`` (the first one; see ``_on_signal``)."""
    previous = _install(names)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def signals_interrupt_for_good(names=STOP_SIGNALS):
    """At the process's entry point: the signals ``names`` raise ``Interrupted`` until the process ends."""
    _install(names)


@contextlib.contextmanager
def held():
    """Signals wait for the end of the block (starting a child process and recording it, creating a folder and
    arranging its removal): then the first one raises, as if it came then."""
    _State.held += 1
    try:
        yield
    finally:
        _State.held -= 1
    if not _State.held and _State.deferred:
        _State.deferred = False
        if _State.armed and not _State.ending:
            _State.armed = False
            raise Interrupted(_State.received)


class exit_held:
    """A context manager whose exit (its cleanup: removing a folder, stopping child processes) runs with signals
    held, so that a first signal landing there does not cut it short: it raises once the cleanup is done."""

    def __init__(self, manager):
        self.manager = manager

    def __enter__(self):
        return self.manager.__enter__()

    def __exit__(self, *exc_info):
        with held():
            return self.manager.__exit__(*exc_info)
