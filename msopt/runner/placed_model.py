"""A model placed on stream devices and loaded in TensorFlow, ready to run, trace and compare its signatures.

Stream ids turn into device strings before TensorFlow optimizes the graph (grappler's fusions drop
``_stream_id`` but keep devices). TF1 graphs run in a v1 Session built from the device configuration;
TF2 SavedModels run their signature functions eagerly, as a plain TensorFlow loop does, and for traces
and profiles also in such a Session, whose step statistics report where each op really ran.
"""

import contextlib
import os
import tempfile
from pathlib import Path

from msopt.errors import held
from msopt.runner.devices import configure_devices, gpu_layout, tensorflow_errors
from msopt.runner.executable import Executable
from msopt.runner.tensorflow_runtime import import_tensorflow
from msopt.runner.workdir import absolute


def place(model, view, streams, device_type, workdir, layout=None):
    """The model with each stream's nodes on its device (written to ``workdir``), the partition and merges.

    ``layout`` (a msopt.runner.gpu_layout.GpuLayout) names the GPU devices when streams are spread over GPUs."""
    from msopt import emit
    from msopt.load import load
    from msopt.planning.plan import plan_rule

    plan, merges = plan_rule("none", view, streams)
    if not plan:
        return model, plan, merges
    out = Path(workdir) / Path(model.path).name
    devices = layout if device_type == "gpu" and layout is not None else device_type
    emit.write(model, plan, out, placement="device", device_type=devices)
    return load(out, ",".join(model.tags) if model.format == "saved_model" else None), plan, merges


def streams_in(view):
    """The number of streams a model's existing ``_stream_id`` attributes name (at least 1)."""
    return max((n.stream for n in view.real_nodes() if n.stream is not None), default=0) + 1


class Runner:
    """A model placed on ``streams`` devices and loaded in TensorFlow, ready to run its signatures."""

    def __init__(
        self,
        model,
        view,
        streams,
        device="auto",
        memory_fraction=None,
        allow_growth=False,
        priorities=None,
        intra_op_threads=0,
        inter_op_threads=0,
        replicas=1,
        merge_copy_streams=False,
    ):
        self.tf = tf = import_tensorflow()
        self.device_type, self.config = configure_devices(
            tf, streams, device, memory_fraction, allow_growth, priorities, replicas, merge_copy_streams
        )
        self.layout = gpu_layout(tf, streams) if self.device_type == "gpu" else None
        self.config.intra_op_parallelism_threads = intra_op_threads  # 0: TensorFlow's choice (all cores)
        self.config.inter_op_parallelism_threads = inter_op_threads
        self._session = self.executable = None
        # A private working directory while the model runs (a graph's save op writes to relative paths).
        self._workdir = tempfile.TemporaryDirectory(prefix="msopt-run-")
        self._cwd = os.getcwd()
        model = absolute(model)
        os.chdir(self._workdir.name)
        try:
            self.model, self.partition, self.merges = place(
                model, view, streams, self.device_type, self._workdir.name, self.layout
            )
            self.view = view
            self.streams = streams
            # TF2 SavedModels run their signature functions eagerly, as a plain TensorFlow loop does.
            with tensorflow_errors("create a Session or context for the model"):
                self.executable = Executable(
                    self.model, streams, self.device_type, session_config=self.config, eager=True
                )
            self.specs = self.executable.specs
        except BaseException:
            self.close()
            raise

    @property
    def session_executable(self):
        """The model in a v1 Session (TF2 too: functions inlined), for step statistics and cutting at tensors."""
        if getattr(self.executable, "session", None) is not None:
            return self.executable
        if self._session is None:
            with tensorflow_errors("create a Session for the model"):
                self._session = Executable(self.model, self.streams, self.device_type, session_config=self.config)
        return self._session

    def load_other(self, model):
        """Another model (e.g. the unpartitioned original) with the same device configuration."""
        with tensorflow_errors("create a Session or context for the model"):
            return Executable(model, self.streams, self.device_type, session_config=self.config, eager=True)

    def traced_steps(self, signature, feeds, count):
        """RunMetadata of ``count`` fully traced steps (step statistics, per device)."""
        v1 = self.tf.compat.v1
        spec = self.specs[signature]
        options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
        metadata = v1.RunMetadata()
        call = self.session_executable.tensor_step(
            [o["name"] for o in spec["outputs"].values()], [spec["inputs"][k]["name"] for k in feeds], options, metadata
        )
        collected = []
        for _ in range(count):
            call(*feeds.values())
            collected.append(v1.RunMetadata.FromString(metadata.SerializeToString()))
        return collected

    def close(self):
        with held():  # a first signal here waits for the work folder to go
            try:
                for executable in (self.executable, self._session):
                    if executable is not None:
                        executable.close()
            finally:
                os.chdir(self._cwd)
                with contextlib.suppress(OSError):  # already gone when a replica run's directory went first
                    self._workdir.cleanup()
