"""R worker processes running the same model at once, their throughput and latency aggregated.

Each worker is ``msopt run`` itself with a hidden start barrier: it loads and warms up, announces it
is ready, and starts measuring only when every worker is ready, so the measured windows overlap.
Works on the CPU as well as on a shared GPU (with CUDA MPS, see msopt.mps).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from msopt.errors import CheckFailed, InputError

READY_TIMEOUT_S = 600.0
POLL_S = 0.02


def wait_for_start(barrier):
    """In a worker: announce readiness in ``barrier`` and wait until the parent says go."""
    barrier = Path(barrier)
    (barrier / f"ready-{os.getpid()}").touch()
    go = barrier / "go"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise CheckFailed("replica: no start signal from the parent process")
        time.sleep(POLL_S / 4)


def run_replicas(worker_args, count, env=None, on_ready=None):
    """Start ``count`` workers (``msopt run`` + ``worker_args``), release them together, aggregate their reports.

    ``on_ready(pids)`` runs once every worker is loaded and warmed up, before they are released."""
    with tempfile.TemporaryDirectory(prefix="msopt-replicas-") as barrier:
        barrier = Path(barrier)
        procs = []
        try:
            for k in range(count):
                args = [sys.executable, "-m", "msopt", "run", *worker_args, "--json", "--worker-barrier", str(barrier)]
                worker_env = {**os.environ, **(env or {}), "MSOPT_REPLICA": str(k)}
                # Files, not pipes: a worker never blocks on output nobody reads yet.
                with open(barrier / f"stdout-{k}", "w") as out, open(barrier / f"stderr-{k}", "w") as err:
                    procs.append(subprocess.Popen(args, stdout=out, stderr=err, text=True, env=worker_env))
            _wait_ready(procs, barrier)
            if on_ready is not None:
                on_ready([p.pid for p in procs])
            (barrier / "go").touch()
            _wait_done(procs, barrier)
        finally:
            for p in procs:  # after a failure: stop the workers still running
                if p.poll() is None:
                    p.kill()
                    p.wait()
        reports = [json.loads((barrier / f"stdout-{k}").read_text()) for k in range(count)]
    return aggregate(reports)


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
    latencies = np.concatenate([np.asarray(r["latencies_ms"]) for r in reports])
    first = min(r["started_unix"] for r in reports)
    last = max(r["started_unix"] + r["wall_s"] for r in reports)
    records = sum(r["steps"] * r["batch_size"] for r in reports)
    steps = sum(r["steps"] for r in reports)
    window = last - first
    per_replica = [{"pid": r["pid"], "device_type": r.get("device_type"), "latency_ms": r["latency_ms"],
                    "throughput": r["throughput"]} for r in reports]
    base = {k: v for k, v in reports[0].items() if k not in ("latencies_ms", "started_unix", "pid", "latency_ms",
                                                             "throughput", "wall_s", "steps")}
    return {
        **base,
        "replicas": len(reports),
        "steps": steps,
        "latency_ms": {
            "mean": _r(latencies.mean()), "p50": _r(np.percentile(latencies, 50)),
            "p95": _r(np.percentile(latencies, 95)), "p99": _r(np.percentile(latencies, 99)),
            "min": _r(latencies.min()), "max": _r(latencies.max()),
        },
        "throughput": {"steps_per_s": _r(steps / window), "records_per_s": _r(records / window),
                       "sum_of_replicas_records_per_s": _r(sum(r["throughput"]["records_per_s"] for r in reports))},
        "wall_s": _r(window),
        "per_replica": per_replica,
    }


def _r(x):
    return round(float(x), 4)
