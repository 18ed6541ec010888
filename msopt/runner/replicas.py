"""R worker processes running the same model at once, their throughput and latency aggregated.

Each worker is ``msopt run`` itself, given the parent's RunConfig as a JSON file and a hidden start
barrier: it loads and warms up, announces it is ready, and starts measuring only when every worker
is ready, so the measured windows overlap.
Works on the CPU as well as on a shared GPU (with CUDA MPS, see msopt.runner.mps).

Nothing outlives the run. Each worker leads a process group of its own (a terminal's Ctrl-C reaches the
parent only), and whatever ends the parent (an error, Ctrl-C, SIGTERM, SIGHUP: one line, "interrupted")
stops the groups and removes the run's directory, which also holds the workers' TMPDIR. A parent killed
outright (SIGKILL) cannot clean up: its workers then get SIGTERM from the kernel (PR_SET_PDEATHSIG on
Linux, a watch on the parent's pid elsewhere), clean their own files and remove the run's directory
themselves.
"""

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from msopt.errors import CheckFailed, InputError, exit_held, held, signals_interrupt

READY_TIMEOUT_S = 600.0
POLL_S = 0.02
STOP_GRACE_S = 5.0  # from SIGTERM to SIGKILL, for a worker to clean up
PARENT_ENV = "MSOPT_REPLICA_PARENT"
STOP_SIGNALS = ("SIGTERM", "SIGHUP")
_PR_SET_PDEATHSIG = 1


def _stop_signals_interrupt():
    """SIGTERM and SIGHUP end the run as Ctrl-C does (msopt.errors.Interrupted), so that the workers are stopped
    and the run's directory removed; under msopt's command line they do already."""
    return signals_interrupt(STOP_SIGNALS)


def serve_as_worker(barrier):
    """In a worker, first thing: end (cleaning up) when the parent ends, even when it is killed outright."""
    parent = int(os.environ.get(PARENT_ENV, os.getppid()))
    barrier = Path(barrier)
    caught = []

    def on_term(signum, frame):
        if not caught:  # once: a second signal must not break the cleanup the first one started
            caught.append(signum)
            signal.alarm(int(STOP_GRACE_S * 2))  # a worker stuck inside TensorFlow still ends
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    atexit.register(lambda: os.getppid() != parent and shutil.rmtree(barrier, ignore_errors=True))
    if not _parent_death_signal(signal.SIGTERM):
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was armed
        raise SystemExit(128 + signal.SIGTERM)


def _parent_death_signal(signum):
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent):
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def wait_for_start(barrier):
    """In a worker: announce readiness in ``barrier`` and wait until the parent says go."""
    from msopt.runner.mpi_launcher import is_rank, wait_for_start_rank

    if is_rank():
        return wait_for_start_rank(barrier)
    barrier = Path(barrier)
    (barrier / f"ready-{os.getpid()}").touch()
    go = barrier / "go"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise CheckFailed("replica: no start signal from the parent process")
        time.sleep(POLL_S / 4)


def run_replicated(config, loaded, progress):
    """``config.replicas`` workers running ``config`` at once (under MPS with ``config.mps``), one report over them.

    Checks first what it can without TensorFlow: the signature and the --inputs file."""
    from msopt.files.inputs import read_npz
    from msopt.graph.contents import signatures
    from msopt.runner.feeds import choose_signature

    specs = signatures(loaded)
    if specs:
        name = choose_signature(specs, config.signature)
        if config.inputs_npz:
            read_npz(config.inputs_npz, specs[name]["inputs"])
    worker = config.for_worker()
    if config.launcher == "mpirun":
        from msopt.runner.mpi_launcher import run_ranks

        progress(f"starting {config.replicas} replicas with mpirun")
        with _stop_signals_interrupt():
            reports, launcher = run_ranks(worker, config.replicas, config.hosts)
        document = {**aggregate(reports), "launcher": launcher, "mps": None}
        for replica, report in zip(document["per_replica"], reports):
            replica.update({k: report.get(k) for k in ("mpi_rank", "host", "cuda_visible_devices")})
        return document
    if not config.mps:
        progress(f"starting {config.replicas} replicas")
        return {**run_replicas(worker, config.replicas), "mps": None}
    from msopt.runner.mps import MpsDaemon, check_client_limit, visible_by_uuid

    daemon = MpsDaemon()  # checks first that the NVIDIA tools are there
    check_client_limit(config.replicas)
    visible_by_uuid()  # the daemon remaps indices; UUIDs name the same GPUs for it and its clients
    with daemon:
        progress(f"MPS daemon on {daemon.pipe_dir}; starting {config.replicas} replicas")
        document = run_replicas(
            worker, config.replicas, env=daemon.client_env(config.mps_threads), on_ready=daemon.check_clients
        )
        daemon.check_alive()
        document["mps"] = {
            **daemon.describe(),
            "active_thread_percentage": config.mps_threads,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
    for k, replica in enumerate(document["per_replica"]):
        if replica.get("device_type") != "gpu":
            raise CheckFailed(
                f"--mps: replica {k} ran on the {replica.get('device_type') or 'unknown device'}, "
                f"not a GPU: TensorFlow saw no GPU there, so MPS had no effect"
            )
    return document


def run_replicas(worker, count, env=None, on_ready=None):
    """Start ``count`` workers running the RunConfig ``worker``, release them together, aggregate their reports.

    Each worker is ``msopt run MODEL --worker-config FILE``, FILE holding ``worker`` as JSON, with its place
    in the run as hidden options. ``on_ready(pids)`` runs once every worker is loaded and warmed up, before
    they are released."""
    # The folder's removal and the workers' stop run with signals held: a first one landing there waits for them.
    with _stop_signals_interrupt(), exit_held(tempfile.TemporaryDirectory(prefix="msopt-replicas-")) as barrier:
        barrier = Path(barrier)
        worker_tmp = barrier / "tmp"  # the workers' temporary files, removed with the run
        worker_tmp.mkdir()
        config_file = barrier / "config.json"
        config_file.write_text(worker.to_json())
        procs = []
        try:
            for k in range(count):
                args = [
                    sys.executable,
                    "-m",
                    "msopt",
                    "run",
                    worker.model,
                    "--worker-config",
                    str(config_file),
                    "--worker-replicas",
                    str(worker.worker_replicas),
                    "--json",
                    "--worker-barrier",
                    str(barrier),
                ]
                worker_env = {
                    **os.environ,
                    **(env or {}),
                    "MSOPT_REPLICA": str(k),
                    PARENT_ENV: str(os.getpid()),
                    "TMPDIR": str(worker_tmp),
                }
                # Files, not pipes: a worker never blocks on output nobody reads yet.
                with open(barrier / f"stdout-{k}", "w") as out, open(barrier / f"stderr-{k}", "w") as err:
                    with held():  # a worker started is a worker _stop knows
                        procs.append(
                            subprocess.Popen(
                                args, stdout=out, stderr=err, text=True, env=worker_env, start_new_session=True
                            )
                        )
            _wait_ready(procs, barrier)
            if on_ready is not None:
                on_ready([p.pid for p in procs])
            (barrier / "go").touch()
            _wait_done(procs, barrier)
        finally:
            with held():
                _stop(procs)
        reports = [json.loads((barrier / f"stdout-{k}").read_text()) for k in range(count)]
    return aggregate(reports)


def _stop(procs):
    """Stop the workers still running: SIGTERM to their groups, SIGKILL after a grace period."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in running:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(p, signal.SIGKILL)
            p.wait()


def _signal_group(proc, signum):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _wait_done(procs, barrier):
    """Wait for every worker; the first one that fails ends the wait (and the run)."""
    while True:
        running = False
        for k, p in enumerate(procs):
            code = p.poll()
            if code is None:
                running = True
            elif code != 0:
                _raise_for(k, code, (barrier / f"stderr-{k}").read_text())
        if not running:
            return
        time.sleep(POLL_S)


def _wait_ready(procs, barrier):
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(list(barrier.glob("ready-*"))) < len(procs):
        for k, p in enumerate(procs):
            if p.poll() is not None:  # a worker ended before it was ready: the others are stopped by the caller
                _raise_for(k, p.returncode, (barrier / f"stderr-{k}").read_text())
        if time.monotonic() > deadline:
            raise CheckFailed(f"replicas not ready after {READY_TIMEOUT_S:g} s")
        time.sleep(POLL_S)


def _raise_for(index, code, stderr):
    lines = [line for line in (stderr or "").strip().splitlines() if line.strip()]
    detail = lines[-1] if lines else "no message"
    if code == 2:  # the worker judged the input bad: the same verdict for the whole run
        raise InputError(f"replica {index}: {detail.removeprefix('msopt: error: ')}")
    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    raise CheckFailed(f"replica {index} {how}: {detail}")


def aggregate(reports):
    """One report over the replicas: total throughput over the common window, latency over all steps."""
    from msopt.runner.latency import latency_table

    latencies = np.concatenate([np.asarray(r["latencies_ms"]) for r in reports])
    first = min(r["started_unix"] for r in reports)
    last = max(r["started_unix"] + r["wall_s"] for r in reports)
    records = sum(r["steps"] * r["batch_size"] for r in reports)
    steps = sum(r["steps"] for r in reports)
    window = last - first
    per_replica = [
        {
            "pid": r["pid"],
            "device_type": r.get("device_type"),
            "latency_ms": r["latency_ms"],
            "throughput": r["throughput"],
            "memory": r.get("memory"),
        }
        for r in reports
    ]
    base = {
        k: v
        for k, v in reports[0].items()
        if k not in ("latencies_ms", "started_unix", "pid", "memory", "latency_ms", "throughput", "wall_s", "steps")
    }
    return {
        **base,
        "replicas": len(reports),
        "steps": steps,
        "latency_ms": latency_table(latencies),
        "throughput": {
            "steps_per_s": _r(steps / window),
            "records_per_s": _r(records / window),
            "sum_of_replicas_records_per_s": _r(sum(r["throughput"]["records_per_s"] for r in reports)),
        },
        "wall_s": _r(window),
        "per_replica": per_replica,
    }


def _r(x):
    return round(float(x), 4)
