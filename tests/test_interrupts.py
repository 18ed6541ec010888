"""SIGINT and SIGTERM at each phase of partition, run and tune: one line (`msopt: error: interrupted`), exit 128 +
the signal, the output absent or whole, no temporary folder and no child process left.

Each msopt process starts with the default signal dispositions (as from a terminal, not as a shell's background
job, which ignores SIGINT) and its stderr on a pty, so that it prints its progress lines: the signal goes out once
the line of a phase is there, or right after the line that precedes it.
"""

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES

MODEL = SAMPLES / "linreg_tf1"
LINE = "msopt: error: interrupted"
SIGNALS = [signal.SIGINT, signal.SIGTERM]
IDS = ["int", "term"]
TAG = "MSOPT_INTERRUPT_TEST"  # in the environment of msopt and of every process it starts


def _default_signals():
    # A child of a background job inherits an ignored SIGINT: the test wants the disposition of a terminal's.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _read(master, timeout):
    """What the pty has within ``timeout`` seconds (b"" when nothing, or no writer is left)."""
    if not select.select([master], [], [], timeout)[0]:
        return b""
    try:
        return os.read(master, 65536)
    except OSError:  # EIO: the process and its children closed the pty
        return b""


def _lines(raw):
    """The lines a terminal shows: a progress bar redraws its line after each carriage return."""
    text = raw.decode(errors="replace").replace("\r\n", "\n")
    return [line.rsplit("\r", 1)[-1].strip() for line in text.split("\n") if line.rsplit("\r", 1)[-1].strip()]


def _children(tag):
    """Processes alive with ``tag`` in their environment: msopt's descendants, whoever adopted them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"{TAG}={tag}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def _exiting(proc):
    """Whether ``proc`` has ended, or is ending: the kernel releases its memory first, and its command line with
    it. A signal then comes too late to change how it ends (the exit of a process that loaded TensorFlow takes
    the kernel some milliseconds)."""
    if proc.poll() is not None:
        return True
    try:
        return not Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    except OSError:
        return True


def interrupt(tmp_path, args, phase, signum, delay=0.0, timeout=300):
    """Run ``msopt ARGS`` until the stderr line holding ``phase``, wait ``delay`` s, send ``signum``; returns
    (exit status, stderr lines, whether the process was ending already when the signal came, the private
    TMPDIR)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    tag = uuid.uuid4().hex
    env = {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2", TAG: tag}
    env.pop("MSOPT_DEBUG", None)
    master, slave = pty.openpty()
    with open(tmp_path / "stdout", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "msopt", *map(str, args)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=slave,
            env=env,
            cwd=ROOT,  # the msopt of this tree
            start_new_session=True,  # no terminal's signal reaches it but the test's
            preexec_fn=_default_signals,
        )
    os.close(slave)
    seen, late = b"", True
    try:
        deadline = time.monotonic() + timeout
        while phase.encode() not in seen and proc.poll() is None and time.monotonic() < deadline:
            seen += _read(master, 0.2)
        assert phase.encode() in seen, f"no '{phase}' line: {seen.decode(errors='replace')[-2000:]}"
        time.sleep(delay)
        proc.send_signal(signum)
        late = _exiting(proc)
        while proc.poll() is None and time.monotonic() < deadline:
            seen += _read(master, 0.2)
        seen += _read(master, 0.2)
        assert proc.poll() is not None, "msopt did not end after the signal"
        leftover = _children(tag)
        deadline = time.monotonic() + 10  # a child's own cleanup may take a moment after its parent ended
        while leftover and time.monotonic() < deadline:
            time.sleep(0.1)
            leftover = _children(tag)
        assert not leftover, f"processes left running: {leftover}"
    finally:  # what a failing test leaves running
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pid in _children(tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os.close(master)
    return proc.returncode, _lines(seen), late, tmp


def check_ended_cleanly(code, lines, late, tmp, signum, outputs=()):
    """The one line and the exit status of an interrupt (unless msopt was ending already, successfully), no
    traceback, no temporary folder in TMPDIR, no build box beside an output."""
    text = "\n".join(lines)
    assert "Traceback" not in text and "internal error" not in text, text
    if code == 0 and late:  # it had succeeded, and said nothing of an error
        assert not any(line.startswith("msopt: error") for line in lines), text
    else:
        assert code == 128 + signum, text
        assert lines and lines[-1] == LINE, text
        assert sum(line.startswith("msopt: error") for line in lines) == 1, text
    assert not list(tmp.iterdir()), [p.name for p in tmp.iterdir()]
    for out in outputs:
        boxes = [p.name for p in Path(out).parent.iterdir() if p.name.startswith(f".{Path(out).name}.msopt-")]
        assert not boxes, boxes


def same_tree(a, b):
    """Whether two folders hold the same files with the same bytes."""
    files = sorted(p.relative_to(a) for p in Path(a).rglob("*"))
    if files != sorted(p.relative_to(b) for p in Path(b).rglob("*")):
        return False
    return all((Path(a) / f).is_dir() or (Path(a) / f).read_bytes() == (Path(b) / f).read_bytes() for f in files)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The partition of the sample model, written without any signal (the output is deterministic)."""
    out = tmp_path_factory.mktemp("reference") / "out"
    done = subprocess.run(
        [sys.executable, "-m", "msopt", "partition", str(MODEL), "-n", "2", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


def partition_args(out, *more):
    return ["partition", MODEL, "-n", "2", "-o", out, *more]


@pytest.mark.parametrize("signum", SIGNALS, ids=IDS)
@pytest.mark.parametrize("phase", ["msopt: loading", "msopt: writing"], ids=["planning", "writing"])
def test_partition_interrupted_while_planning_or_writing(tmp_path, reference, phase, signum):
    out = tmp_path / "out"
    code, lines, late, tmp = interrupt(tmp_path, partition_args(out), phase, signum)
    check_ended_cleanly(code, lines, late, tmp, signum, [out])
    assert not out.exists() or same_tree(out, reference), "a partial output"


@pytest.mark.tf
@pytest.mark.parametrize("signum", SIGNALS, ids=IDS)
def test_partition_verify_interrupted_while_tensorflow_runs(tmp_path, reference, signum):
    out = tmp_path / "out"
    code, lines, late, tmp = interrupt(tmp_path, partition_args(out, "--verify"), "verifying in TensorFlow", signum)
    check_ended_cleanly(code, lines, late, tmp, signum, [out])
    assert not out.exists() or same_tree(out, reference), "a partial output"


@pytest.mark.tf
@pytest.mark.parametrize("signum", SIGNALS, ids=IDS)
@pytest.mark.parametrize("phase", ["loading TensorFlow", "measuring"], ids=["loading", "measuring"])
def test_run_interrupted_while_loading_or_measuring(tmp_path, phase, signum):
    args = ["run", MODEL, "--device", "cpu", "--iterations", "10000000", "--warmup", "1"]
    code, lines, late, tmp = interrupt(tmp_path, args, phase, signum)
    check_ended_cleanly(code, lines, late, tmp, signum)


def tune_outputs(out):
    return [out, *(Path(f"{out}.{suffix}") for suffix in ("costs.json", "tune.json", "host_profile.json"))]


def check_tune_outputs(out):
    """Each output absent or whole: the model loads, the JSON files parse."""
    from msopt.load import load

    if out.exists():
        load(out)  # the SavedModel's graph parses
        assert (out / "variables").is_dir()
    for path in tune_outputs(out)[1:]:
        if path.exists():
            json.loads(path.read_text())


@pytest.mark.tf
@pytest.mark.slow  # three tunes of the sample model per signal: about two minutes on two shared cores
@pytest.mark.parametrize("signum", SIGNALS, ids=IDS)
@pytest.mark.parametrize("phase, rounds", [("msopt: measuring", 100000), ("msopt: fitting", 1), ("msopt: writing", 1)])
def test_tune_interrupted_while_measuring_fitting_or_writing(tmp_path, phase, rounds, signum):
    """Ctrl-C while measuring keeps the best candidate of the complete rounds (written whole, exit 130); any
    other signal, or at another phase, ends the tune with whatever was already in place."""
    out = tmp_path / "out"
    args = ["tune", MODEL, "-n", "2", "--max-candidates", "2", "--rounds", rounds, "--steps", "2", "-o", out]
    code, lines, late, tmp = interrupt(tmp_path, args, phase, signum)
    check_ended_cleanly(code, lines, late, tmp, signum, tune_outputs(out))
    check_tune_outputs(out)
    if phase == "msopt: measuring" and signum == signal.SIGTERM:
        assert not out.exists(), "SIGTERM ends the tune without writing"


def test_the_line_and_exit_status_in_process(monkeypatch):
    """An in-process caller (click's test runner) gets the same line and status, and its own signal handlers
    back afterwards."""
    from click.testing import CliRunner

    from msopt import errors
    from msopt.cli import main

    before = signal.getsignal(signal.SIGTERM)

    @main.command("interrupt-me", hidden=True)
    def interrupt_me():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in the main thread before this ends
        raise AssertionError("not interrupted")

    try:
        done = CliRunner().invoke(main, ["interrupt-me"])
    finally:
        main.commands.pop("interrupt-me")
    assert done.exit_code == 128 + signal.SIGTERM, done.output
    assert done.output.strip().splitlines()[-1] == LINE
    assert signal.getsignal(signal.SIGTERM) == before and errors.interrupted() == signal.SIGTERM


def test_an_interrupt_turned_into_another_error_ends_as_an_interrupt():
    """An interrupt that lands inside an import surfaces as an ImportError (pybind11's "initialization failed"):
    the command still ends as interrupted, not as an internal error."""
    from click.testing import CliRunner

    from msopt.cli import main

    @main.command("import-me", hidden=True)
    def import_me():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e

    try:
        done = CliRunner().invoke(main, ["import-me"])
    finally:
        main.commands.pop("import-me")
    assert done.exit_code == 130 and done.output.strip().splitlines() == [LINE], done.output


def test_held_signals_wait_for_the_end_of_the_block():
    from msopt import errors

    with errors.signals_interrupt(["SIGTERM"]):
        started = time.monotonic()
        with pytest.raises(errors.Interrupted) as raised:
            with errors.held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler runs meanwhile, and holds it
                finished = time.monotonic()
        assert raised.value.signum == signal.SIGTERM and finished - started >= 0.2
        os.kill(os.getpid(), signal.SIGTERM)  # a second one: the first one's cleanup must not break
        time.sleep(0.1)
