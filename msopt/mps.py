"""NVIDIA tooling: find the GPUs (nvidia-smi) and run the CUDA MPS control daemon for a measurement.

A daemon already serving ``CUDA_MPS_PIPE_DIRECTORY`` (default /tmp/nvidia-mps) is joined and left
running; otherwise one is started with private pipe and log directories and stopped afterwards.
A client that cannot reach the daemon silently runs without MPS, so the daemon is checked again
after the run.
"""
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from msopt.errors import CheckFailed, InputError

CONTROL = "nvidia-cuda-mps-control"
SMI = "nvidia-smi"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
START_TIMEOUT_S = 10.0


def nvidia_smi(*args):
    """stdout lines of nvidia-smi, or InputError naming what is missing."""
    path = shutil.which(SMI)
    if path is None:
        raise InputError(f"no NVIDIA GPU: {SMI} is not on PATH (install the NVIDIA driver)")
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(f"{SMI} failed: {e}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise InputError(f"no usable NVIDIA GPU: {SMI} {' '.join(args)} failed: {detail[0] if detail else done.returncode}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def list_gpus():
    """The GPUs nvidia-smi lists ('GPU 0: <name> (UUID: ...)'); InputError if there are none."""
    gpus = [line for line in nvidia_smi("-L") if line.startswith("GPU ")]
    if not gpus:
        raise InputError(f"no NVIDIA GPU: {SMI} -L lists none")
    return gpus


def gpu_memory_mb(count):
    """Total memory (MB) of the first ``count`` visible GPUs, honouring CUDA_VISIBLE_DEVICES indices."""
    totals = [int(float(v)) for v in nvidia_smi("--query-gpu=memory.total", "--format=csv,noheader,nounits")]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        indices = [int(v) for v in visible.split(",") if v.strip().isdigit()]
        totals = [totals[i] for i in indices if i < len(totals)]
    if len(totals) < count:
        raise InputError(f"{SMI} reports memory for {len(totals)} GPU(s), TensorFlow sees {count}")
    return totals[:count]


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
                raise InputError(f"the MPS daemon did not answer within {START_TIMEOUT_S:g} s (log: {self._log_tail()})")
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

    def check_alive(self):
        """CheckFailed if the daemon went away during the run (its clients may have run without MPS)."""
        if not self.reachable():
            raise CheckFailed(f"the MPS daemon on {self.pipe_dir} stopped during the run; "
                              f"the replicas may have run without MPS (log: {self._log_tail()})")

    def stop(self):
        if self.reachable():
            self._control([], "quit\n")
            deadline = time.monotonic() + START_TIMEOUT_S
            while os.path.exists(os.path.join(self.pipe_dir, "control")) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.started = False
        self._cleanup()

    def describe(self):
        return {"pipe_directory": self.pipe_dir, "log_directory": self.log_dir, "started_by_msopt": self._private is not None}

    def _control(self, args, stdin=None):
        env = {**os.environ, **self.client_env()}
        try:
            return subprocess.run([self.control, *args], input=stdin, capture_output=True, text=True, env=env, timeout=30)
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
