"""msopt run --replicas leaves nothing behind: no worker outlives the parent (SIGTERM, SIGKILL, Ctrl-C,
a crashed worker) and no temporary file stays in TMPDIR."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLES

pytestmark = pytest.mark.tf

MODEL = SAMPLES / "linreg_tf1"
SETTLE_S = 15.0  # how long the cleanup may take, at most (it usually takes well under a second)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # an orphan nobody reaped yet is dead
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def start(tmp_path, replicas=3):
    """A parent measuring for a long time; returns it, its worker pids and the private TMPDIR, once measuring."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    parent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "msopt",
            "run",
            str(MODEL),
            "--device",
            "cpu",
            "--replicas",
            str(replicas),
            "--iterations",
            "10000000",
            "--warmup",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        barriers = list(tmp.glob("msopt-replicas-*"))
        if barriers and (barriers[0] / "go").exists():
            workers = [int(p.name.split("-")[1]) for p in barriers[0].glob("ready-*")]
            assert len(workers) == replicas
            return parent, workers, tmp
        assert parent.poll() is None, parent.communicate()
        time.sleep(0.05)
    parent.kill()
    pytest.fail("the replicas never started measuring")


def settled(workers, tmp):
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in workers) and not list(tmp.iterdir()):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def reaper():
    """Kill, after the test, any worker a failing test left running."""
    pids = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT], ids=["term", "kill", "int"])
def test_a_signal_to_the_parent_ends_every_worker_and_leaves_no_temporary_file(tmp_path, reaper, signum):
    parent, workers, tmp = start(tmp_path)
    reaper.extend(workers)
    parent.send_signal(signum)
    _, err = parent.communicate(timeout=60)
    assert settled(workers, tmp), ([pid for pid in workers if alive(pid)], [p.name for p in tmp.rglob("*")])
    if signum == signal.SIGINT:
        assert parent.returncode == 130 and err.strip() == "msopt: error: interrupted"
    elif signum == signal.SIGTERM:
        assert parent.returncode == 128 + signal.SIGTERM and err.strip() == "msopt: error: interrupted"


def test_a_crashed_worker_ends_the_run_and_its_files_go_too(tmp_path, reaper):
    parent, workers, tmp = start(tmp_path)
    reaper.extend(workers)
    os.kill(workers[1], signal.SIGKILL)
    _, err = parent.communicate(timeout=60)
    assert parent.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "was killed by signal 9" in lines[0], err
    assert settled(workers, tmp), ([pid for pid in workers if alive(pid)], [p.name for p in tmp.rglob("*")])
