"""Test probe loaded (as sitecustomize, via PYTHONPATH) into msopt's replica worker processes only.

For every process started with MSOPT_REPLICA set (the workers `msopt run --replicas` starts):
records the CUDA environment (and TF_FORCE_GPU_*, TF_CUDNN_*) it received and its arguments into
$MSOPT_PROBE_DIR/replica-<k>.json; when
MSOPT_PROBE_ATTACH is "all" or lists its index (comma-separated), attaches to the stand-in MPS
daemon as a CUDA client would (a standin-client-<pid> file in its pipe directory); and, when
MSOPT_PROBE_CRASH names its replica index, kills the process: at start-up
(MSOPT_PROBE_CRASH_AT=start) or once the parent has released the workers (=run).
"""

import json
import os
import signal
import sys
import threading
import time

_replica = os.environ.get("MSOPT_REPLICA")
_probe = os.environ.get("MSOPT_PROBE_DIR")
if _replica is not None and _probe:
    with open(os.path.join(_probe, f"replica-{_replica}.json"), "w") as _f:
        json.dump(
            {
                **{k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "TF_FORCE_GPU", "TF_CUDNN"))},
                "argv": sys.argv,
            },
            _f,
        )
    _attach = os.environ.get("MSOPT_PROBE_ATTACH", "")
    if _attach == "all" or _replica in _attach.split(","):
        _pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
        open(os.path.join(_pipe, f"standin-client-{os.getpid()}"), "w").close()
    if os.environ.get("MSOPT_PROBE_CRASH") == _replica:
        if os.environ.get("MSOPT_PROBE_CRASH_AT", "start") == "start":
            os.kill(os.getpid(), signal.SIGKILL)
        _barrier = sys.argv[sys.argv.index("--worker-barrier") + 1] if "--worker-barrier" in sys.argv else None

        def _crash_when_released():
            while _barrier and not os.path.exists(os.path.join(_barrier, "go")):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=_crash_when_released, daemon=True).start()
