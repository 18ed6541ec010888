"""msopt run --replicas and --mps: worker processes, aggregation, and the MPS daemon's life cycle.

The MPS daemon and nvidia-smi are the stand-ins in tests/bin (on PATH here only); TensorFlow
sees no GPU, so the replicas run on the CPU while the orchestration around them is real.
"""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SAMPLES, run_msopt

BIN = Path(__file__).resolve().parent / "bin"
PROBE = BIN / "replica_probe"
MODEL = SAMPLES / "linreg_tf1"


def standin_env(tmp_path, **extra):
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    return {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(PROBE), "MSOPT_PROBE_DIR": str(probe),
            "MSOPT_STANDIN_EVENTS": str(tmp_path / "events.jsonl"), **{k: str(v) for k, v in extra.items()}}


def events(tmp_path):
    path = tmp_path / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def probes(tmp_path):
    return {p.name: json.loads(p.read_text()) for p in sorted((tmp_path / "probe").glob("replica-*.json"))}


def test_replicas_on_the_cpu_are_aggregated():
    done = run_msopt("run", MODEL, "--device", "cpu", "--replicas", 2, "--iterations", 40, "--warmup", 2, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["replicas"] == 2 and doc["steps"] == 80 and len(doc["per_replica"]) == 2
    assert len({r["pid"] for r in doc["per_replica"]}) == 2 and doc["mps"] is None
    assert doc["throughput"]["records_per_s"] > 0 and doc["latency_ms"]["p99"] >= doc["latency_ms"]["p50"] > 0


def test_mps_starts_a_private_daemon_passes_its_environment_and_stops_it(tmp_path):
    done = run_msopt("run", MODEL, "--device", "cpu", "--mps", "--mps-threads", 40, "--replicas", 2,
                     "--iterations", 20, "--json", env=standin_env(tmp_path))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    mps = doc["mps"]
    assert mps["started_by_msopt"] and mps["active_thread_percentage"] == 40
    assert "ran on the CPU and MPS had no effect" in done.stderr
    commands = [e["command"] for e in events(tmp_path)]
    assert commands[0] == "-d" and commands[-1] == "quit" and "get_server_list" in commands
    assert all(e["pipe"] == mps["pipe_directory"] for e in events(tmp_path))
    seen = probes(tmp_path)
    assert set(seen) == {"replica-0.json", "replica-1.json"}
    for env in seen.values():
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == mps["pipe_directory"]
        assert env["CUDA_MPS_LOG_DIRECTORY"] == mps["log_directory"]
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert not Path(mps["pipe_directory"]).exists()  # private directories removed after the daemon stopped


def test_mps_joins_a_running_daemon_and_leaves_it_running(tmp_path):
    pipe, log = tmp_path / "pipe", tmp_path / "log"
    env = standin_env(tmp_path, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=log)
    control = [str(BIN / "nvidia-cuda-mps-control")]
    subprocess.run(control + ["-d"], env={**os.environ, **env}, check=True)
    try:
        for _ in range(100):
            if (pipe / "control").exists():
                break
            time.sleep(0.05)
        done = run_msopt("run", MODEL, "--device", "cpu", "--mps", "--iterations", 5, "--json", env=env)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["mps"]["pipe_directory"] == str(pipe) and not doc["mps"]["started_by_msopt"]
        commands = [e["command"] for e in events(tmp_path)]
        assert commands.count("-d") == 1 and "quit" not in commands  # only the test's own start
        assert (pipe / "control").exists()
    finally:
        subprocess.run(control, input="quit\n", text=True, env={**os.environ, **env})


def test_a_daemon_that_dies_during_the_run_fails_the_run(tmp_path):
    env = standin_env(tmp_path, MSOPT_STANDIN_MPS_LIFETIME=0.5)
    done = run_msopt("run", MODEL, "--device", "cpu", "--mps", "--iterations", 5, "--json", env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert "MPS daemon" in done.stderr and "stopped during the run" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("when", ["start", "run"])
def test_a_replica_that_crashes_fails_the_run_and_stops_the_others(tmp_path, when):
    env = standin_env(tmp_path, MSOPT_PROBE_CRASH=1, MSOPT_PROBE_CRASH_AT=when)
    done = run_msopt("run", MODEL, "--device", "cpu", "--mps", "--replicas", 2, "--iterations", 200000,
                     "--json", env=env, timeout=300)
    assert done.returncode == 1 and done.stdout == ""
    assert "replica 1 was killed by signal 9" in done.stderr and done.stderr.count("\n") == 1
    assert [e["command"] for e in events(tmp_path)][-1] == "quit"  # the daemon is still stopped


def test_mps_without_a_gpu_names_what_is_missing(tmp_path):
    only_smi = tmp_path / "only-smi"
    only_smi.mkdir()
    (only_smi / "nvidia-smi").symlink_to(BIN / "nvidia-smi")
    python_dir = os.path.dirname(os.path.realpath(os.sys.executable))
    cases = [
        ({"PATH": python_dir}, "nvidia-smi is not on PATH"),
        ({**standin_env(tmp_path), "MSOPT_STANDIN_NO_GPU": "1"}, "No devices were found"),
        ({"PATH": f"{only_smi}{os.pathsep}{python_dir}"}, "nvidia-cuda-mps-control is not on PATH"),
    ]
    for env, message in cases:
        done = run_msopt("run", MODEL, "--mps", env=env)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and done.stderr.count("\n") == 1


def test_options_that_need_one_process_are_refused_with_replicas():
    done = run_msopt("run", MODEL, "--replicas", 2, "--trace", "t.json")
    assert done.returncode == 2 and "--trace runs in one process" in done.stderr
