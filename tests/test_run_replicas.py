"""msopt run --replicas and --mps: worker processes, aggregation, and the MPS daemon's life cycle.

The MPS daemon and nvidia-smi are the stand-ins in tests/bin (on PATH here only); TensorFlow
sees no GPU, so the replicas run on the CPU while the orchestration around them is real. The
replica probe attaches each worker to the stand-in daemon as a CUDA client would (unless a test
says otherwise), so a run under --mps ends with the check that every replica ran on a GPU.
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SAMPLES, run_msopt

pytestmark = pytest.mark.tf

BIN = Path(__file__).resolve().parent / "bin"
PROBE = BIN / "replica_probe"
MODEL = SAMPLES / "linreg_tf1"


def standin_env(tmp_path, **extra):
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    return {
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(PROBE),
        "MSOPT_PROBE_DIR": str(probe),
        "MSOPT_STANDIN_EVENTS": str(tmp_path / "events.jsonl"),
        "MSOPT_PROBE_ATTACH": "all",
        **{k: str(v) for k, v in extra.items()},
    }


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


@pytest.mark.slow
def test_mps_starts_a_private_daemon_passes_its_environment_and_stops_it(tmp_path):
    done = run_msopt(
        "run",
        MODEL,
        "--device",
        "cpu",
        "--mps",
        "--mps-threads",
        40,
        "--replicas",
        2,
        "--iterations",
        20,
        "--json",
        env=standin_env(tmp_path),
    )
    # Every replica attached, but TensorFlow saw no GPU: a run under MPS that did not use it fails.
    assert done.returncode == 1 and done.stdout == ""
    assert "--mps: replica 0 ran on the cpu, not a GPU" in done.stderr and done.stderr.count("\n") == 1
    commands = [e["command"] for e in events(tmp_path)]
    assert commands[0] == "-d" and commands[-1] == "quit" and "get_server_list" in commands
    assert any(c.startswith("get_client_list ") for c in commands)  # the attach check asked the server
    pipe = events(tmp_path)[0]["pipe"]
    assert all(e["pipe"] == pipe for e in events(tmp_path))
    seen = probes(tmp_path)
    assert set(seen) == {"replica-0.json", "replica-1.json"}
    for env in seen.values():
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == pipe
        assert env["CUDA_MPS_LOG_DIRECTORY"].startswith(str(Path(pipe).parent))
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert not Path(pipe).exists()  # private directories removed after the daemon stopped


@pytest.mark.slow
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
        assert done.returncode == 1 and "replica 0 ran on the cpu" in done.stderr  # no GPU here
        assert all(e["pipe"] == str(pipe) for e in events(tmp_path))
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
@pytest.mark.slow
def test_a_replica_that_crashes_fails_the_run_and_stops_the_others(tmp_path, when):
    env = standin_env(tmp_path, MSOPT_PROBE_CRASH=1, MSOPT_PROBE_CRASH_AT=when)
    done = run_msopt(
        "run",
        MODEL,
        "--device",
        "cpu",
        "--mps",
        "--replicas",
        2,
        "--iterations",
        200000,
        "--json",
        env=env,
        timeout=300,
    )
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


@pytest.mark.slow
def test_a_replica_that_never_attaches_to_the_daemon_fails_the_run(tmp_path):
    env = standin_env(tmp_path, MSOPT_PROBE_ATTACH="0")  # replica 1 runs, but not as a client of the server
    done = run_msopt("run", MODEL, "--device", "cpu", "--mps", "--replicas", 2, "--iterations", 5, env=env)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "--mps: replica 1 (pid " in done.stderr and "is not a client of the MPS server" in done.stderr
    assert [e["command"] for e in events(tmp_path)][-1] == "quit"


TWO_GPUS = json.dumps(
    [
        {
            "name": "Stand-in A",
            "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
            "pci": "00000000:3B:00.0",
            "memory": 16384,
            "cc": "8.0",
        },
        {
            "name": "Stand-in A",
            "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000",
            "pci": "00000000:5E:00.0",
            "memory": 16384,
            "cc": "8.0",
        },
    ]
)


@pytest.mark.slow
def test_mps_names_the_gpus_by_uuid_for_the_daemon_and_the_replicas(tmp_path):
    env = standin_env(tmp_path, MSOPT_STANDIN_GPUS=TWO_GPUS)
    done = run_msopt(
        "run", MODEL, "--device", "cpu", "--mps", "--gpus", "1", "--replicas", 2, "--iterations", 5, env=env
    )
    assert done.returncode == 1 and "ran on the cpu" in done.stderr
    started = [e for e in events(tmp_path) if e["command"] == "-d"]
    assert started[0]["visible"] == "GPU-bbbbbbbb-0000-0000-0000-000000000000"  # not "1": the daemon remaps indices
    assert {p["CUDA_VISIBLE_DEVICES"] for p in probes(tmp_path).values()} == {started[0]["visible"]}
    assert all(p["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" for p in probes(tmp_path).values())


@pytest.mark.parametrize("cc, replicas, limit", [("6.0", 17, 16), ("8.0", 49, 48)])
def test_replicas_under_mps_are_capped_at_the_documented_client_limit(tmp_path, cc, replicas, limit):
    gpus = json.dumps([{"name": "G", "uuid": "GPU-1", "pci": "0:1", "memory": 8000, "cc": cc}])
    done = run_msopt("run", MODEL, "--mps", "--replicas", replicas, env=standin_env(tmp_path, MSOPT_STANDIN_GPUS=gpus))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"--replicas {replicas} with --mps: an MPS server accepts at most {limit} clients per GPU" in done.stderr
    assert events(tmp_path) == []  # refused before any daemon started
