"""Replicas started by Open MPI's ``mpirun``: one rank per replica, MPI's barrier to start together, reports gathered.

The parent runs ``mpirun -n R [-H host:slots,...] python -m msopt run MODEL --worker-config FILE ...``.
Each rank picks its GPU from its local rank (``OMPI_COMM_WORLD_LOCAL_RANK`` -> ``CUDA_VISIBLE_DEVICES``),
loads and warms up, waits at ``MPI.COMM_WORLD.Barrier()``, measures, and rank 0 gathers every rank's
report (``comm.gather``) and prints them; the parent aggregates them as it does local replicas'. Across
several hosts the model, the worker configuration file and msopt must be at the same paths on every host.
mpirun ends every rank when one dies, and its message names the rank and the signal.
"""

import contextlib
import ctypes
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from msopt.errors import CheckFailed, InputError, exit_held, held

MPI_ENV = "MSOPT_MPI"  # set in every rank by the parent (mpirun -x)
HOSTS = re.compile(r"^[A-Za-z0-9_.\-]+(:[1-9][0-9]*)?$")
# Open MPI's report of a rank that died: "mpirun noticed that process rank 1 with PID 123 on node h exited on
# signal 9 (Killed)."
RANK_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
RANK_STATUS = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited (?:with|on) (?:status|code) (\d+)")


def check_open_mpi():
    """mpirun (Open MPI) and mpi4py, or InputError naming what is missing; returns mpirun's path."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise InputError("--launcher mpirun: mpirun is not on PATH (install Open MPI: apt-get install openmpi-bin)")
    try:
        version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise InputError(f"--launcher mpirun: {mpirun} --version failed: {e}") from None
    if "Open MPI" not in version and "OpenRTE" not in version:
        first = (version.strip().splitlines() or ["no output"])[0]
        raise InputError(f"--launcher mpirun: {mpirun} is not Open MPI's ({first})")
    if importlib.util.find_spec("mpi4py") is None:
        raise InputError("--launcher mpirun: the Python package mpi4py is not installed (pip install mpi4py)")
    return mpirun


def parse_hosts(text):
    """``--hosts a:2,b:2`` -> the value of ``mpirun -H`` (checked: host names with optional slot counts)."""
    if text is None:
        return None
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    bad = [h for h in hosts if not HOSTS.match(h)]
    if not hosts or bad:
        raise InputError(f"--hosts '{text}': expected host:slots,... (e.g. node1:2,node2:2)")
    return ",".join(hosts)


def run_ranks(worker, count, hosts=None):
    """``count`` ranks of ``worker`` (a RunConfig) under mpirun; returns their reports and the launcher's summary."""
    mpirun = check_open_mpi()
    hosts = parse_hosts(hosts)
    # The folder's removal and mpirun's stop run with signals held: a first one landing there waits for them.
    with exit_held(tempfile.TemporaryDirectory(prefix="msopt-replicas-")) as run_dir:
        run_dir = Path(run_dir)
        (run_dir / "tmp").mkdir()
        config_file = run_dir / "config.json"
        config_file.write_text(worker.to_json())
        args = [mpirun, "-n", str(count), "--oversubscribe"]
        if os.geteuid() == 0:
            args.append("--allow-run-as-root")
        if hosts:
            args += ["-H", hosts]
        args += ["-x", f"{MPI_ENV}=1", "-x", f"TMPDIR={run_dir / 'tmp'}"]
        args += [sys.executable, "-m", "msopt", "run", worker.model, "--worker-config", str(config_file)]
        args += ["--worker-replicas", str(worker.worker_replicas), "--json", "--worker-barrier", str(run_dir)]
        with open(run_dir / "stdout", "w") as out, open(run_dir / "stderr", "w") as err:
            proc = None
            try:
                with held():  # an interrupt inside Popen would leave mpirun running, unknown to _stop
                    proc = subprocess.Popen(
                        args, stdout=out, stderr=err, text=True, start_new_session=True, preexec_fn=_die_with_parent
                    )
                code = proc.wait()
            finally:
                with held():
                    if proc is not None:
                        _stop(proc)
        stdout, stderr = (run_dir / "stdout").read_text(), (run_dir / "stderr").read_text()
    if code != 0:
        raise_for(code, stderr)
    try:
        reports = json.loads(stdout[stdout.index("{") :])["mpi_reports"]
    except (ValueError, KeyError):
        raise CheckFailed(f"mpirun: rank 0 printed no report: {stdout.strip()[-300:] or 'no output'}") from None
    return reports, {"name": "mpirun", "hosts": hosts, "ranks": count}


def raise_for(code, stderr):
    """mpirun's failure as msopt's verdict: a rank that judged its input bad -> exit 2; a dead rank -> exit 1."""
    errors = [line for line in stderr.splitlines() if line.startswith("msopt: error: ")]
    if code == 2 and errors:
        raise InputError(f"replica: {errors[-1].removeprefix('msopt: error: ')}")
    died = RANK_SIGNAL.search(stderr)
    if died:
        raise CheckFailed(f"replica {died.group(1)} was killed by signal {died.group(2)} (mpirun ended every rank)")
    status = RANK_STATUS.search(stderr)
    detail = errors[-1].removeprefix("msopt: error: ") if errors else _last_line(stderr)
    if status:
        raise CheckFailed(f"replica {status.group(1)} exited with status {status.group(2)}: {detail}")
    raise CheckFailed(f"mpirun exited with status {code}: {detail}")


def _last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip() and not set(line.strip()) <= set("-")]
    return lines[-1] if lines else "no message"


def _die_with_parent():
    """In mpirun's process: SIGTERM when msopt dies, even killed outright (Linux), so that mpirun ends its ranks."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)


def _stop(proc, grace=10.0):
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)  # mpirun forwards it to its ranks and ends them
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- in each rank ------------------------------------------------------------------------------------


def is_rank():
    return bool(os.environ.get(MPI_ENV))


def serve_as_rank(config):
    """In a rank, first thing: its GPU from its local rank; returns the config with the ranks sharing a GPU."""
    import dataclasses

    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    local_size = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e for e in visible.split(",") if e.strip()] if visible else None
    if entries is None:
        from msopt.runner.gpu_inventory import visible_gpus

        with contextlib.suppress(Exception):
            entries = [str(k) for k in range(len(visible_gpus()))]
    if entries:
        os.environ["CUDA_VISIBLE_DEVICES"] = entries[local % len(entries)]
        return dataclasses.replace(config, worker_replicas=max(1, math.ceil(local_size / len(entries))))
    return config


def wait_for_start_rank(barrier):
    """Every rank loaded and warmed up: MPI's barrier (and a ready file, for anyone watching on this host)."""
    from mpi4py import MPI

    with contextlib.suppress(OSError):
        (Path(barrier) / f"ready-{os.getpid()}").touch()
    MPI.COMM_WORLD.Barrier()


def gather_reports(document):
    """Rank 0: every rank's report ({"mpi_reports": [...]}); other ranks: None (they print nothing)."""
    import socket

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    document = {
        **document,
        "mpi_rank": comm.Get_rank(),
        "host": socket.gethostname(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "finished_unix": time.time(),
    }
    reports = comm.gather(document, root=0)
    return {"mpi_reports": reports} if comm.Get_rank() == 0 else None
