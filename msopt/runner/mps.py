"""NVIDIA tooling: find the GPUs (nvidia-smi) and run the CUDA MPS control daemon for a measurement.

A daemon already serving ``CUDA_MPS_PIPE_DIRECTORY`` (default /tmp/nvidia-mps) is joined and left
running; otherwise one is started with private pipe and log directories and stopped afterwards.
A client that cannot reach the daemon silently runs without MPS, so once the workers are ready
each one is looked up in the servers' client lists (``get_server_list``, ``get_client_list``),
and the daemon is checked again after the run.
"""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from msopt.errors import CheckFailed, InputError
from msopt.runner.gpu_inventory import SMI, compute_capabilities, nvidia_smi, uuids_for

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
START_TIMEOUT_S = 10.0
ATTACH_TIMEOUT_S = 10.0  # how long ready workers get to show up in the server's client list
VOLTA_CLIENTS, PRE_VOLTA_CLIENTS = 48, 16


def list_gpus():
    """The GPUs nvidia-smi lists ('GPU 0: <name> (UUID: ...)'); InputError if there are none."""
    gpus = [line for line in nvidia_smi("-L") if line.startswith("GPU ")]
    if not gpus:
        raise InputError(f"no NVIDIA GPU: {SMI} -L lists none")
    return gpus


def client_limit():
    """Client CUDA contexts one MPS server accepts per GPU: 48 from Volta (compute capability 7) on, 16 before.

    NVIDIA's MPS documentation (Limitations): "Volta MPS server supports 48 client CUDA contexts
    per-device"; pre-Volta MPS servers 16. Unknown capability (nvidia-smi older than r510): 48.
    """
    majors = list(compute_capabilities().values())
    return PRE_VOLTA_CLIENTS if majors and min(majors) < 7 else VOLTA_CLIENTS


def check_client_limit(replicas):
    """InputError when ``replicas`` clients exceed what MPS accepts on each GPU (every replica uses every GPU)."""
    limit = client_limit()
    if replicas > limit:
        raise InputError(
            f"--replicas {replicas} with --mps: an MPS server accepts at most {limit} clients per GPU "
            f"(NVIDIA's MPS documentation), and every replica is a client of every GPU it uses"
        )


def visible_by_uuid():
    """Under MPS, CUDA_VISIBLE_DEVICES by UUID: the daemon remaps indices (its clients see 0..n-1), so an index
    kept for the clients names the wrong GPU or none; UUIDs name the same GPUs for both. Returns the UUIDs."""
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None or not any(e.strip().isdigit() for e in spec.split(",")):
        return None
    uuids = uuids_for([e.strip() for e in spec.split(",") if e.strip()])
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(uuids)
    return uuids


class MpsDaemon:
    """Context manager: a reachable MPS control daemon for the duration of a run.

    ``client_env(threads)`` is the environment a client process needs (pipe and log
    directories, and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE when ``threads`` is given).
    """

    def __init__(self):
        list_gpus()
        self.control = shutil.which(CONTROL)
        if self.control is None:
            raise InputError(f"--mps: {CONTROL} is not on PATH (it ships with the NVIDIA driver / CUDA toolkit)")
        self.pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE_DIRECTORY)
        self.log_dir = os.environ.get("CUDA_MPS_LOG_DIRECTORY")
        self.started = False
        self._private = None

    def __enter__(self):
        if self.reachable():
            return self  # join the daemon serving this pipe directory, leave it running afterwards
        self._private = Path(tempfile.mkdtemp(prefix="msopt-mps-"))
        self.pipe_dir = str(self._private / "pipe")
        self.log_dir = str(self._private / "log")
        os.makedirs(self.pipe_dir)
        os.makedirs(self.log_dir)
        done = self._control(["-d"])
        if done.returncode != 0:
            self._cleanup()
            raise InputError(f"{CONTROL} -d failed ({done.returncode}): {_last_line(done)}")
        self.started = True
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.reachable():
            if time.monotonic() > deadline:
                self.stop()
                raise InputError(
                    f"the MPS daemon did not answer within {START_TIMEOUT_S:g} s (log: {self._log_tail()})"
                )
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        if self.started:
            self.stop()
        return False

    def client_env(self, threads=None):
        env = {"CUDA_MPS_PIPE_DIRECTORY": self.pipe_dir}
        if self.log_dir:
            env["CUDA_MPS_LOG_DIRECTORY"] = self.log_dir
        if threads is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(threads)
        return env

    def reachable(self):
        """True when a control daemon answers on the pipe directory."""
        if not os.path.exists(os.path.join(self.pipe_dir, "control")):
            return False
        return self._control([], "get_server_list\n").returncode == 0

    def attached_clients(self):
        """PIDs of the clients of every MPS server this daemon runs."""
        servers = self._control([], "get_server_list\n")
        clients = set()
        for server in (s.strip() for s in servers.stdout.splitlines()):
            if server.isdigit():
                listed = self._control([], f"get_client_list {server}\n").stdout.split()
                clients.update(int(pid) for pid in listed if pid.isdigit())
        return clients

    def check_clients(self, pids, timeout=ATTACH_TIMEOUT_S):
        """CheckFailed naming the first replica (index in ``pids``) that is not an MPS client: it runs without MPS."""
        deadline = time.monotonic() + timeout
        while True:
            clients = self.attached_clients()
            missing = [k for k, pid in enumerate(pids) if pid not in clients]
            if not missing:
                return
            self.check_alive()
            if time.monotonic() > deadline:
                k = missing[0]
                raise CheckFailed(
                    f"--mps: replica {k} (pid {pids[k]}) is not a client of the MPS server on "
                    f"{self.pipe_dir}, so it runs without MPS (clients: "
                    f"{', '.join(map(str, sorted(clients))) or 'none'}; did TensorFlow see a GPU?)"
                )
            time.sleep(0.1)

    def check_alive(self):
        """CheckFailed if the daemon went away during the run (its clients may have run without MPS)."""
        if not self.reachable():
            raise CheckFailed(
                f"the MPS daemon on {self.pipe_dir} stopped during the run; "
                f"the replicas may have run without MPS (log: {self._log_tail()})"
            )

    def stop(self):
        if self.reachable():
            self._control([], "quit\n")
            deadline = time.monotonic() + START_TIMEOUT_S
            while os.path.exists(os.path.join(self.pipe_dir, "control")) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.started = False
        self._cleanup()

    def describe(self):
        return {
            "pipe_directory": self.pipe_dir,
            "log_directory": self.log_dir,
            "started_by_msopt": self._private is not None,
        }

    def _control(self, args, stdin=None):
        env = {**os.environ, **self.client_env()}
        try:
            return subprocess.run(
                [self.control, *args], input=stdin, capture_output=True, text=True, env=env, timeout=30
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, 124, "", f"{CONTROL} timed out")

    def _log_tail(self):
        log = Path(self.log_dir or "") / "control.log"
        try:
            lines = log.read_text().strip().splitlines()
            return lines[-1] if lines else "empty"
        except OSError:
            return "none"

    def _cleanup(self):
        if self._private is not None and not self.started:
            shutil.rmtree(self._private, ignore_errors=True)


def _last_line(done):
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else "no message"
