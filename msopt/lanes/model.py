"""``msopt partition --lanes K``: a SavedModel whose serving signature spreads concurrent calls over K pinned lanes.

The written model wraps the original (loaded once, its variables saved once) in a module with:
- ``serving_default``: a counter variable (``AssignAddVariableOp``) modulo K selects a branch of a
  ``Case`` (``tf.switch_case``); branch k calls the original signature under ``/device:<TYPE>:k``;
- ``serving_lane_k``: the same signature pinned to lane k (for a caller that chooses the lane itself).
Beside it go the session configurations that create the K devices: TF Serving's ``--platform_config_file``
text and a note for Triton. This module imports TensorFlow: only ``partition --lanes`` reaches it.
"""

import json
from pathlib import Path

from msopt.errors import InputError
from msopt.files import outputs

PLATFORM_CONFIG = """# Written by msopt partition --lanes.
# TensorFlow Serving: tensorflow_model_server --platform_config_file=THIS_FILE --model_base_path=...
# The session config creates {lanes} {kind} devices for the {lanes} lanes of {model}.
platform_configs {{
  key: "tensorflow"
  value {{
    source_adapter_config {{
      [type.googleapis.com/tensorflow.serving.SavedModelBundleSourceAdapterConfig] {{
        legacy_config {{
          session_config {{
{session}
          }}
        }}
      }}
    }}
  }}
}}
"""

TRITON_NOTE = """Triton Inference Server, TensorFlow backend: {lanes} lanes of {model} (written by msopt partition --lanes)

The TensorFlow backend documents no option for virtual GPUs today: its command-line options are
--backend-config=tensorflow,allow-soft-placement=<bool>, gpu-memory-fraction=<float>, version=<int>,
default-max-batch-size=<int>, and its model parameters (config.pbtxt) are TF_NUM_INTRA_THREADS,
TF_NUM_INTER_THREADS, TF_USE_PER_SESSION_THREADS, TF_GRAPH_TAG, TF_SIGNATURE_DEF,
MAX_SESSION_SHARE_COUNT and TF_INIT_OPS_FILE (triton-inference-server/tensorflow_backend README).
Older Triton releases (1.x) had a server option adding TensorFlow virtual GPUs
(TRITONSERVER_ServerOptionsAddTensorFlowVgpuMemoryLimits(options, gpu_device, num_vgpus,
per_vgpu_memory_mbytes), the --tf-add-vgpu command-line option); it is gone from current releases.

So with a current Triton this lanes model's branches name devices Triton does not create: serve
the original model with an instance_group of {lanes} instances instead (each instance its own
session), or run this model under TF Serving with the platform config written beside it.
Neither server was run here.
"""


def session_config_text(lanes, device_type, memory_mb=None):
    """The ConfigProto (text) creating ``lanes`` devices: virtual GPUs on GPU 0, or logical CPU devices."""
    if device_type == "cpu":
        return f'device_count {{ key: "CPU" value: {lanes} }}\ndevice_count {{ key: "GPU" value: 0 }}'
    limit = memory_mb or 1024
    limits = " ".join(f"memory_limit_mb: {limit}" for _ in range(lanes))
    return f"gpu_options {{ experimental {{ virtual_devices {{ {limits} }} }} }}\nallow_soft_placement: true"


def write_lanes_model(model, lanes, out=None, device_type="gpu", force=False, memory_mb=None, tags=None, report=None):
    """Write the SavedModel at ``model`` (TF1 or TF2) as a K-lane SavedModel at ``out`` (default ``<model>_lanes<K>``)
    with TF Serving's platform config and a Triton note beside it; ``report`` (a path) gets the JSON report too."""
    from msopt.files import output_guard
    from msopt.files.output_guard import Output, given
    from msopt.load import load
    from msopt.runner.tensorflow_runtime import error_line, import_tensorflow

    out = Path(given("-o", out) or f"{str(model).rstrip('/')}_lanes{lanes}")
    platform, triton = Path(f"{out}.platform_config.pbtxt"), Path(f"{out}.triton.txt")
    report = given("--report", report)
    written = [Output("-o", out, "model"), Output("-o (platform config)", platform, "text")]
    written += [Output("-o (Triton note)", triton, "text"), Output("--report", report, "json") if report else None]
    output_guard.check([model], written, force)
    model = load(model, tags)
    if model.format != "saved_model":
        raise InputError(f"{model.path}: --lanes writes a SavedModel and needs one as input (given a {model.format})")
    refs = sorted(n.name for n in model.graph_def.node if n.op in ("VariableV2", "Variable"))
    if refs:
        raise InputError(
            f"{model.path}: --lanes re-saves the model with TensorFlow 2, which cannot save reference variables "
            f"(VariableV2 '{refs[0]}' and {len(refs) - 1} more): convert the model to resource variables first"
        )
    tf = import_tensorflow()
    try:
        loaded = tf.saved_model.load(str(model.path), tags=list(model.tags))
    except Exception as e:
        raise InputError(f"{model.path}: TensorFlow cannot load the model: {error_line(e)}") from None
    signatures = dict(loaded.signatures)
    if not signatures:
        raise InputError(f"{model.path}: the model has no signature to spread over lanes")
    name = "serving_default" if "serving_default" in signatures else sorted(signatures)[0]
    inner = signatures[name]
    spec = inner.structured_input_signature[1]
    devices = [f"/device:{device_type.upper()}:{k}" for k in range(lanes)]
    module = _module(tf, loaded, inner, spec, devices)
    with outputs.staged(out) as tmp:
        try:
            sigs = {"serving_default": module.serve.get_concrete_function()}
            sigs.update({f"serving_lane_{k}": f.get_concrete_function() for k, f in enumerate(module.lane_functions)})
            tf.saved_model.save(module, str(tmp), signatures=sigs)
        except Exception as e:
            raise InputError(f"{model.path}: TensorFlow cannot write the lanes model: {error_line(e)}") from None
        output_guard.mark(tmp)
        outputs.put(tmp, out, force)
    session = session_config_text(lanes, device_type, memory_mb)
    indented = "\n".join("            " + line for line in session.splitlines())
    config = PLATFORM_CONFIG.format(lanes=lanes, kind=device_type.upper(), model=out.name, session=indented)
    outputs.write_bytes(platform, config.encode(), force)
    outputs.write_bytes(triton, TRITON_NOTE.format(lanes=lanes, model=out.name).encode(), force)
    document = {
        "input": str(model.path),
        "output": str(out),
        "lanes": lanes,
        "signature": name,
        "devices": devices,
        "signatures": sorted(sigs),
        "selection": "counter (AssignAddVariableOp) mod K -> Case branch k on lane k's device",
        "platform_config": str(platform),
        "triton": str(triton),
        "note": "neither TF Serving nor Triton was run; the model was written by TensorFlow "
        + tf.__version__
        + ", loaded back by the tests on logical CPU devices",
    }
    if report:
        outputs.write_bytes(report, json.dumps(document, indent=2).encode(), force)
    return document


def _module(tf, loaded, inner, spec, devices):
    """The tf.Module saved: the original object, a counter, the Case signature and one pinned signature per lane."""
    signature = [tf.TensorSpec(s.shape, s.dtype, name=k) for k, s in spec.items()]
    keys = list(spec)
    lanes = len(devices)

    class Lanes(tf.Module):
        def __init__(self):
            super().__init__()
            self.original = loaded
            with tf.device("/device:CPU:0"):
                self.counter = tf.Variable(tf.constant(0, tf.int64), name="lane_counter")
            self.lane_functions = [self._pinned(d) for d in devices]

        def _pinned(self, device):
            @tf.function(input_signature=signature)
            def lane(*args):
                with tf.device(device):
                    return inner(**dict(zip(keys, args)))

            return lane

        @tf.function(input_signature=signature)
        def serve(self, *args):
            feeds = dict(zip(keys, args))
            with tf.device("/device:CPU:0"):
                ticket = self.counter.assign_add(1)
                lane = tf.cast(tf.math.floormod(ticket - 1, lanes), tf.int32)

            def branch(device):
                def run():
                    with tf.device(device):
                        return inner(**feeds)

                return run

            return tf.switch_case(lane, [branch(d) for d in devices])

    return Lanes()
