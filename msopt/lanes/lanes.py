"""Lanes: K copies of a model's request path, each pinned to its own device(s), loaded once where TensorFlow allows.

Lane k of K with N op-level streams owns devices k*N .. k*N+N-1 (virtual GPUs on a GPU, logical CPU
devices on the CPU; msopt.runner.devices.configure_devices makes K*N of them).

- ``shared`` weights (a TF2 SavedModel whose ops carry no stream, N = 1): one loaded object; each lane
  calls its signature under ``tf.device(lane device)``. The compute ops run on the lane's device, but
  every ``ReadVariableOp`` runs on the variable's device (the first device) and its value is sent to
  the lane: an embedding table read by ``ReadVariableOp`` then ``GatherV2`` (Keras) travels whole to the
  lane on every request; a ``ResourceGather`` runs on the variable's device itself. The report counts them.
- ``copy`` weights: the model placed once per lane (devices offset by k*N, variables on the lane's
  devices) and loaded once per lane: K copies of the variables, no cross-lane reads. TF1 graphs (one
  Session per lane) and models already split into streams always use copies.
"""

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from msopt.errors import InputError

MAX_DEVICES = 1024  # lanes x streams: the same bound as --streams
VARIABLE_READS = ("ReadVariableOp", "ResourceGather", "ResourceGatherNd", "VarHandleOp", "VariableV2")


def check_lane_options(lanes, concurrency, streams, lane_weights, can_share):
    """Refuse what cannot run before TensorFlow starts: too many devices, shared weights that cannot be shared."""
    if lanes * streams > MAX_DEVICES:
        raise InputError(
            f"--lanes {lanes} x {streams} stream(s) = {lanes * streams} devices: at most {MAX_DEVICES} devices "
            f"(lanes x streams) can be configured"
        )
    if lane_weights == "shared" and not can_share:
        raise InputError(
            "--lane-weights shared needs a TF2 SavedModel whose ops carry no _stream_id (one stream per lane); "
            "use --lane-weights copy"
        )
    if concurrency < 1 or lanes < 1:
        raise InputError("--lanes and --concurrency must be at least 1")


def can_share_weights(model, streams):
    """True when one loaded object can serve every lane: a TF2 SavedModel run on one stream per lane."""
    return model.format == "saved_model" and model.is_tf2 and streams == 1


@dataclass(frozen=True)
class LaneDevices:
    """Device names of one lane: stream s of lane ``lane`` is device lane*streams+s of ``base`` (a type or layout)."""

    base: object
    lane: int
    streams: int

    def device_name(self, stream):
        from msopt.emit import device_name

        return device_name(self.base, self.lane * self.streams + stream)


class Lanes:
    """K lanes of a model loaded in TensorFlow; ``call(lane, feeds)`` runs one request on lane ``lane``."""

    def __init__(self, model, view, lanes, streams, device="auto", lane_weights=None, runner_options=None):
        from msopt.runner.devices import configure_devices, gpu_layout, tensorflow_errors
        from msopt.runner.tensorflow_runtime import import_tensorflow
        from msopt.runner.workdir import absolute

        options = dict(runner_options or {})
        self.tf = tf = import_tensorflow()
        self.lanes, self.streams = lanes, streams
        self.device_type, self.config = configure_devices(
            tf,
            lanes * streams,
            device,
            options.get("memory_fraction"),
            options.get("allow_growth", False),
            options.get("priorities"),
        )
        self.config.intra_op_parallelism_threads = options.get("intra_op_threads", 0)
        self.config.inter_op_parallelism_threads = options.get("inter_op_threads", 0)
        self.layout = gpu_layout(tf, lanes * streams) if self.device_type == "gpu" else None
        base = self.layout if self.layout is not None else self.device_type
        self.devices = [[LaneDevices(base, k, streams).device_name(s) for s in range(streams)] for k in range(lanes)]
        share = can_share_weights(model, streams)
        self.weights = lane_weights or ("shared" if share else "copy")
        self.model = model = absolute(model)
        self._workdir = tempfile.TemporaryDirectory(prefix="msopt-lanes-")
        self._cwd = os.getcwd()
        os.chdir(self._workdir.name)  # a graph's save op writes to relative paths
        self.executables = []
        try:
            with tensorflow_errors("create a Session or context for the lanes"):
                if self.weights == "shared":
                    from msopt.runner.executable import Executable

                    shared = Executable(model, lanes, self.device_type, session_config=self.config, eager=True)
                    self.executables = [shared] * lanes
                else:
                    self.executables = [self._lane_copy(view, k, base) for k in range(lanes)]
            self.specs = self.executables[0].specs
        except BaseException:
            self.close()
            raise
        self._first_calls = {}

    def _lane_copy(self, view, lane, base):
        """Lane ``lane``'s own placed copy: every op on its lane's devices (unassigned ops on the lane's stream 0)."""
        from msopt import emit
        from msopt.load import load
        from msopt.runner.executable import Executable

        partition = {node.key: node.stream or 0 for node in view.real_nodes()}
        out = Path(self._workdir.name) / f"lane{lane}" / Path(self.model.path).name
        out.parent.mkdir()
        emit.write(self.model, partition, out, placement="device", device_type=LaneDevices(base, lane, self.streams))
        placed = load(out, ",".join(self.model.tags) if self.model.format == "saved_model" else None)
        return Executable(placed, self.lanes * self.streams, self.device_type, session_config=self.config, eager=True)

    def step(self, lane, signature, feeds):
        """A callable running one request of ``feeds`` on lane ``lane``; returns its outputs."""
        executable = self.executables[lane]
        run = executable.step(signature, feeds)
        if self.weights != "shared":
            return run
        device, tf = self.devices[lane][0], self.tf

        def on_lane():
            with tf.device(device):  # thread-local: each client thread's scope is its own
                return run()

        return on_lane

    def executed_devices(self, signature, feeds):
        """Per lane, where its ops ran: {lane: {"ops": {device: count}, "variable_reads": {device: count}}}.

        TF2 functions: the partition graphs TensorFlow's runtime built and ran at the lane's first call (its
        run metadata; later calls reuse them). TF1 Sessions: the step statistics of one fully traced step.
        Call before any other step of the lanes has run (a function is partitioned once per device)."""
        from msopt.runner.trace import short_device

        result = {}
        for lane in range(self.lanes):
            nodes = self._executed_nodes(lane, signature, feeds)
            ops, reads = {}, {}
            for device, op in nodes:
                if op in ("_Arg", "_Retval", "_Send", "_Recv", "NoOp", "Const", "_HostSend", "_HostRecv"):
                    continue
                table = reads if op in VARIABLE_READS else ops
                table[short_device(device)] = table.get(short_device(device), 0) + 1
            own = set(self.devices[lane])
            result[str(lane)] = {
                "devices": self.devices[lane],
                "ops": ops,
                "variable_reads": reads,
                "pinned": bool(ops) and set(ops) <= own,  # every compute op on the lane's own devices
            }
        return result

    def _executed_nodes(self, lane, signature, feeds):
        executable = self.executables[lane]
        if getattr(executable, "session", None) is not None:
            v1 = self.tf.compat.v1
            spec = self.specs[signature]
            options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
            metadata = v1.RunMetadata()
            executable.tensor_step(
                [o["name"] for o in spec["outputs"].values()],
                [spec["inputs"][k]["name"] for k in feeds],
                options,
                metadata,
            )(*feeds.values())
            return [(d.device, _op_of(ns)) for d in metadata.step_stats.dev_stats for ns in d.node_stats]
        from tensorflow.python.eager import context

        ctx = context.context()
        ctx.enable_run_metadata()
        try:
            self.step(lane, signature, feeds)()
            metadata = ctx.export_run_metadata()
        finally:
            ctx.disable_run_metadata()
        return [(n.device, n.op) for g in metadata.function_graphs for pg in g.partition_graphs for n in pg.node]

    def variable_bytes(self):
        """Bytes of one copy of the model's variables (as TensorFlow holds them)."""
        executable = self.executables[0]
        loaded = getattr(executable, "_loaded", None)
        if loaded is not None:
            variables = getattr(loaded, "variables", ())
        else:
            with executable.graph.as_default():
                variables = self.tf.compat.v1.global_variables()
        return int(sum(v.shape.num_elements() * v.dtype.size for v in variables if v.shape.is_fully_defined()))

    def describe_weights(self):
        copies = 1 if self.weights == "shared" else self.lanes
        per_copy = self.variable_bytes()
        return {
            "mode": self.weights,
            "copies": copies,
            "bytes_per_copy": per_copy,
            "bytes_total": per_copy * copies,
            "rss_mb": _rss_mb(),
        }

    def close(self):
        try:
            for executable in {id(e): e for e in self.executables}.values():
                executable.close()
        finally:
            os.chdir(self._cwd)
            self._workdir.cleanup()


def _op_of(node_stats):
    label = node_stats.timeline_label
    return label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else ""


def _rss_mb():
    """This process's resident memory now (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None
