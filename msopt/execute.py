"""Run a model's signatures in TensorFlow on N logical devices: shared by --verify and the runner.

TensorFlow is imported here, inside functions, and nowhere on the proto-only paths.
"""
import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import warnings

from msopt.errors import InputError
from msopt.inspect import signatures as signature_specs
from msopt.protos import DTYPE_NAMES

_configured = {}  # device type -> logical devices configured in this process (TF2 runtime)
_held = []  # the terminal's fd once TensorFlow's runtime logs are held back (once per process)


@contextlib.contextmanager
def quiet_native_stderr():
    """Hold back what TensorFlow's C++ runtime prints at start-up (absl logs ignore
    TF_CPP_MIN_LOG_LEVEL before initialization); replay it on failure or with MSOPT_DEBUG."""
    if os.environ.get("MSOPT_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            sys.stderr.write(held.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with quiet_native_stderr():
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        tf.config.list_physical_devices()  # initializes the platforms (and their start-up logs)
    hold_runtime_logs()
    return tf


def hold_runtime_logs():
    """Keep TensorFlow's own log lines (C++ runtime, absl, Python warnings) off the user's stderr for the rest
    of the process, unless MSOPT_DEBUG is set: fd 2 goes to /dev/null and Python's sys.stderr keeps the
    terminal. Only when sys.stderr is this process's fd 2 (not under a test harness that captured it)."""
    if os.environ.get("MSOPT_DEBUG") or _held:
        return
    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(tensorflow|tf_keras|keras|absl)(\.|$)")
    try:
        if sys.stderr.fileno() != 2:
            return
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    sys.stderr = io.TextIOWrapper(os.fdopen(terminal, "wb", buffering=0), encoding=sys.stderr.encoding or "utf-8",
                                  errors="backslashreplace", line_buffering=True, write_through=True)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    _held.append(terminal)


def configure_logical_devices(tf, count, device_type="cpu"):
    """Split the first physical device into ``count`` logical ones (once per process)."""
    kind = device_type.upper()
    have = _configured.get(kind)
    if have is not None:
        if have < count:
            raise InputError(f"this process already configured {have} logical {kind} devices; {count} were asked")
        return
    physical = tf.config.list_physical_devices(kind)
    if not physical:
        raise InputError(f"no {kind} device is available to TensorFlow (use --device-type cpu)")
    config = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    if kind == "GPU":
        raise InputError("GPU virtual devices are configured by msopt run, not by --verify")
    try:  # CPU streams: hide the GPUs before the context starts, or unassigned ops would run on GPU:0
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:
        if tf.config.get_visible_devices("GPU"):
            raise InputError("TensorFlow already initialized its GPUs in this process") from None
    tf.config.set_logical_device_configuration(physical[0], config)
    _configured[kind] = count


class Executable:
    """A loaded model whose signatures can be run on numpy feeds."""

    def __init__(self, model, devices, device_type="cpu", soft_placement=False, variable_values=None,
                 session_config=None, eager=False):
        """``session_config`` (a ConfigProto whose devices the caller configured) runs every format in a v1
        Session, TF2 SavedModels too; with ``eager`` a TF2 SavedModel's functions run eagerly instead."""
        self.tf = tf = import_tensorflow()
        self.model = model
        self.specs = signature_specs(model)
        self._session_config = session_config
        if model.format == "saved_model" and model.is_tf2 and (session_config is None or eager):
            if session_config is None:
                configure_logical_devices(tf, devices, device_type)
            else:
                soft_placement = session_config.allow_soft_placement
            tf.config.set_soft_device_placement(soft_placement)
            self._load_tf2()
        else:
            self._load_tf1(devices, device_type, soft_placement, variable_values)

    # -- TF2: functions called eagerly ------------------------------------------------------
    def _load_tf2(self):
        tf = self.tf
        # Stock loading puts every variable on the default device, ignoring the device the SavedModel
        # records for it (emit writes the stream's device there); this policy honours it. Soft placement
        # must be on while loading, for a recorded device this process lacks.
        policy = tf.saved_model.experimental.VariablePolicy.SAVE_VARIABLE_DEVICES
        soft = tf.config.get_soft_device_placement()
        tf.config.set_soft_device_placement(True)
        try:
            self._loaded = tf.saved_model.load(str(self.model.path), tags=list(self.model.tags),
                                               options=tf.saved_model.LoadOptions(experimental_variable_policy=policy))
        except Exception as e:  # TensorFlow raises many types here
            raise InputError(f"{self.model.path}: TensorFlow cannot load the model: {error_line(e)}") from None
        finally:
            tf.config.set_soft_device_placement(soft)
        self._functions = dict(self._loaded.signatures)

    # -- TF1: a Session over the graph -------------------------------------------------------
    def _load_tf1(self, devices, device_type, soft_placement, variable_values):
        tf = self.tf
        v1 = tf.compat.v1
        counts = {device_type.upper(): devices, **({"GPU": 0} if device_type.upper() == "CPU" else {})}
        config = self._session_config or v1.ConfigProto(device_count=counts, allow_soft_placement=soft_placement)
        self.graph = tf.Graph()
        self.session = v1.Session(graph=self.graph, config=config)
        try:
            with self.graph.as_default():
                if self.model.format == "saved_model":
                    v1.saved_model.loader.load(self.session, list(self.model.tags), str(self.model.path))
                elif self.model.format == "meta_graph":
                    meta = v1.MetaGraphDef.FromString(self.model.meta_graph.SerializeToString())
                    v1.train.import_meta_graph(meta, clear_devices=False)
                    self._initialize_variables(variable_values)
                else:
                    graph_def = v1.GraphDef.FromString(self.model.graph_def.SerializeToString())
                    tf.graph_util.import_graph_def(graph_def, name="")
        except Exception as e:
            raise InputError(f"{self.model.path}: TensorFlow cannot load the model: {error_line(e)}") from None
        if not self.specs:
            self.specs = {"graph": self._graph_signature()}

    def _initialize_variables(self, values):
        """Run the initializers, then impose ``values`` (so two copies of a graph agree)."""
        v1 = self.tf.compat.v1
        variables = v1.global_variables()
        if not variables:
            return
        self.session.run(v1.variables_initializer(variables))
        for var in variables:
            if values and var.op.name in values:
                var.load(values[var.op.name], self.session)

    def variable_values(self):
        if getattr(self, "session", None) is None or self.model.format != "meta_graph":
            return None
        with self.graph.as_default():
            variables = self.tf.compat.v1.global_variables()
        return dict(zip((v.op.name for v in variables), self.session.run(variables))) if variables else None

    def _graph_signature(self):
        """Placeholders in, unconsumed tensors out: the signature of a bare graph."""
        ops = self.graph.get_operations()
        consumed = {t.name for op in ops for t in op.inputs}
        inputs, outputs = {}, {}
        for op in ops:
            if op.type == "Placeholder":
                t = op.outputs[0]
                shape = None if t.shape.rank is None else [d for d in t.shape.as_list()]
                inputs[op.name] = {"name": t.name, "dtype": DTYPE_NAMES[t.dtype.as_datatype_enum], "shape": shape}
        for op in ops:
            for t in op.outputs:
                if t.name not in consumed and op.type != "Placeholder" and t.dtype not in (self.tf.resource,) and t.dtype.base_dtype == t.dtype:
                    outputs[t.name] = {"name": t.name, "dtype": DTYPE_NAMES[t.dtype.as_datatype_enum], "shape": None}
        return {"method": "", "inputs": inputs, "outputs": outputs}

    # -- running -------------------------------------------------------------------------------
    def run(self, signature, feeds):
        """Outputs ({key: ndarray}) of ``signature`` for ``feeds`` ({input key: ndarray})."""
        spec = self.specs[signature]
        if hasattr(self, "_functions"):
            fn = self._functions[signature]
            result = fn(**{k: self.tf.constant(v) for k, v in feeds.items()})
            return {k: v.numpy() for k, v in result.items()}
        fetches = {k: v["name"] for k, v in spec["outputs"].items()}
        feed_dict = {spec["inputs"][k]["name"]: v for k, v in feeds.items()}
        return self.session.run(fetches, feed_dict=feed_dict)

    def step(self, signature, feeds):
        """A callable running ``signature`` on fixed ``feeds`` with the least per-call work; returns outputs."""
        spec = self.specs[signature]
        if hasattr(self, "_functions"):
            fn, tensors = self._functions[signature], {k: self.tf.constant(v) for k, v in feeds.items()}
            return lambda: {k: v.numpy() for k, v in fn(**tensors).items()}
        keys = sorted(spec["outputs"])
        call = self.tensor_step([spec["outputs"][k]["name"] for k in keys], [spec["inputs"][k]["name"] for k in feeds])
        values = list(feeds.values())
        return lambda: dict(zip(keys, call(*values)))

    def tensor_step(self, fetch_names, feed_names, options=None, run_metadata=None):
        """A Session call from tensor names to tensor names (any tensor of the graph may be fed).

        Session.run with tensor names, as a plain TensorFlow loop does: measured faster than
        make_callable (which copies each fed array) and than Tensor objects as keys.
        """
        if getattr(self, "session", None) is None:
            raise InputError("running by tensor name needs a Session (TF1 graph or session_config)")
        fetches, feed_names = list(fetch_names), list(feed_names)
        for name in fetches + feed_names:
            self.graph.get_tensor_by_name(name)  # fail now, not on the first step
        run = self.session.run
        return lambda *values: run(fetches, dict(zip(feed_names, values)), options=options, run_metadata=run_metadata)

    def close(self):
        if getattr(self, "session", None) is not None:
            self.session.close()


NOISE = re.compile(r"^(Graph execution error:|Detected at node|Node: |File |<stack traces unavailable>|"
                   r"Original stack trace|\d+ root error\(s\) found|\d+ successful operations|"
                   r"\d+ derived errors ignored|Additional GRPC error information)")


def error_line(error):
    """One line from a TensorFlow error: the node and the reason TensorFlow gives, not its first line.

    TensorFlow's runtime errors read "Graph execution error:", then where the node was defined,
    then the reason, then ``[[{{node NAME}}]]``: the reason is the line before that marker.
    """
    text = str(getattr(error, "message", None) or error).strip()
    node = re.search(r"\[\[\{\{node ([^}]+)\}\}", text) or re.search(r"Detected at node '?([^'\s]+)'?", text)
    lines = [line.strip() for line in text.splitlines()]
    marker = next((i for i, line in enumerate(lines) if "[[{{node" in line), len(lines))
    reason = ""
    for line in reversed(lines[:marker + 1]):
        line = re.sub(r"\s*\[\[\{\{node [^}]+\}\}\]\].*$", "", line).strip()
        line = re.sub(r"^\(\d+\) [A-Z_]+: ", "", line)
        if line and not NOISE.match(line):
            reason = line
            break
    reason = reason or next((line for line in lines if line and not NOISE.match(line)), "") or type(error).__name__
    reason = reason[:300]
    if node and node.group(1) not in reason:
        return f"node '{node.group(1)}': {reason}"
    return reason
