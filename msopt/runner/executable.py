"""The executable: a model's signatures run in TensorFlow on numpy feeds, in a TF1 Session or as TF2 functions."""

from msopt.errors import InputError
from msopt.graph.contents import signatures as signature_specs
from msopt.graph.protos import DTYPE_NAMES
from msopt.runner.devices import configure_devices, logical_devices
from msopt.runner.tensorflow_runtime import error_line, import_tensorflow


class Executable:
    """A loaded model whose signatures can be run on numpy feeds."""

    def __init__(
        self,
        model,
        devices,
        device_type="cpu",
        soft_placement=False,
        variable_values=None,
        session_config=None,
        eager=False,
    ):
        """``session_config`` (a ConfigProto whose devices the caller configured) runs every format in a v1
        Session, TF2 SavedModels too; with ``eager`` a TF2 SavedModel's functions run eagerly instead."""
        self.tf = tf = import_tensorflow()
        self.model = model
        self.specs = signature_specs(model)
        if session_config is None:  # --verify: this process's devices, configured as msopt run configures them
            device_type, session_config = configure_devices(tf, devices, device_type)
            session_config.allow_soft_placement = soft_placement
            if model.format == "saved_model" and model.is_tf2:
                have = logical_devices(tf, device_type)
                if have < devices:
                    raise InputError(
                        f"this process already configured {have} logical {device_type.upper()} devices; "
                        f"{devices} were asked"
                    )
                eager = True
        self._session_config = session_config
        if model.format == "saved_model" and model.is_tf2 and eager:
            tf.config.set_soft_device_placement(session_config.allow_soft_placement)
            self._load_tf2()
        else:
            self._load_tf1(variable_values)

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
            self._loaded = tf.saved_model.load(
                str(self.model.path),
                tags=list(self.model.tags),
                options=tf.saved_model.LoadOptions(experimental_variable_policy=policy),
            )
        except Exception as e:  # TensorFlow raises many types here
            raise InputError(f"{self.model.path}: TensorFlow cannot load the model: {error_line(e)}") from None
        finally:
            tf.config.set_soft_device_placement(soft)
        self._functions = dict(self._loaded.signatures)

    # -- TF1: a Session over the graph -------------------------------------------------------
    def _load_tf1(self, variable_values):
        tf = self.tf
        v1 = tf.compat.v1
        self.graph = tf.Graph()
        self.session = v1.Session(graph=self.graph, config=self._session_config)
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
                if (
                    t.name not in consumed
                    and op.type != "Placeholder"
                    and t.dtype not in (self.tf.resource,)
                    and t.dtype.base_dtype == t.dtype
                ):
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
