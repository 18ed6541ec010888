"""msopt run --replicas R --launcher mpirun: Open MPI's ranks, MPI barrier and gather, reported as local replicas are."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import SAMPLES, run_msopt

pytestmark = pytest.mark.tf
MODEL = SAMPLES / "linreg_tf1"
needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed (scripts/setup.sh)")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@needs_mpi
def test_two_ranks_give_the_figures_of_two_local_replicas():
    common = ["run", MODEL, "--device", "cpu", "--replicas", 2, "--iterations", 40, "--warmup", 2, "--json"]
    local = run_msopt(*common)
    mpi = run_msopt(*common, "--launcher", "mpirun")
    assert local.returncode == 0 and mpi.returncode == 0, (local.stderr, mpi.stderr)
    local, mpi = json.loads(local.stdout), json.loads(mpi.stdout)
    assert set(local) <= set(mpi) and mpi["launcher"] == {"name": "mpirun", "hosts": None, "ranks": 2}
    assert mpi["replicas"] == 2 and mpi["steps"] == 80 == local["steps"]
    assert sorted(r["mpi_rank"] for r in mpi["per_replica"]) == [0, 1]
    assert len({r["pid"] for r in mpi["per_replica"]}) == 2 and os.getpid() not in {
        r["pid"] for r in mpi["per_replica"]
    }
    assert mpi["throughput"]["records_per_s"] > 0 and set(mpi["latency_ms"]) == set(local["latency_ms"])


@needs_mpi
def test_a_rank_killed_mid_run_fails_the_run_and_nothing_is_left(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [sys.executable, "-m", "msopt", "run", str(MODEL), "--device", "cpu", "--replicas", "2"]
    args += ["--launcher", "mpirun", "--iterations", "10000000", "--warmup", "1"]
    parent = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ranks = []
    try:
        deadline = time.monotonic() + 300
        while len(ranks) < 2 and time.monotonic() < deadline:
            assert parent.poll() is None, parent.communicate()
            ranks = [int(p.name.split("-")[1]) for p in tmp.glob("msopt-replicas-*/ready-*")]
            time.sleep(0.1)
        assert len(ranks) == 2, "the ranks never got past MPI's barrier"
        time.sleep(1.0)  # measuring now
        os.kill(ranks[1], signal.SIGKILL)
        out, err = parent.communicate(timeout=120)
        assert parent.returncode == 1 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "was killed by signal 9" in lines[0] and lines[0].startswith("msopt: error: replica")
        deadline = time.monotonic() + 15
        while (any(alive(p) for p in ranks) or list(tmp.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(p) for p in ranks) and list(tmp.iterdir()) == []
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in ranks:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_mpirun_missing_is_one_line_and_exit_2(tmp_path):
    python_dir = os.path.dirname(os.path.realpath(sys.executable))
    done = run_msopt(
        "run",
        MODEL,
        "--replicas",
        2,
        "--launcher",
        "mpirun",
        "--save-outputs",
        tmp_path / "o.npz",
        env={"PATH": python_dir},
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("msopt: error: --launcher mpirun: mpirun is not on PATH")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, says",
    [
        (["--launcher", "mpirun", "--hosts", "a b:2"], "--hosts 'a b:2'"),
        (["--hosts", "node1:2"], "--hosts applies with --launcher mpirun"),
    ],
)
def test_bad_hosts_are_refused(args, says):
    done = run_msopt("run", MODEL, "--replicas", 2, *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


def test_hosts_become_mpirun_h():
    from msopt.runner.mpi_launcher import parse_hosts

    assert parse_hosts("node1:2, node2:4") == "node1:2,node2:4"
    assert parse_hosts("localhost") == "localhost"


def test_a_rank_takes_the_gpu_of_its_local_rank(monkeypatch):
    from msopt.runner.config import RunConfig
    from msopt.runner.mpi_launcher import serve_as_rank

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    config = serve_as_rank(RunConfig(model="m"))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3" and config.worker_replicas == 2
