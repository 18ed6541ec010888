"""Write a partitioned model: the only module that writes models.

Stream ids become ``_stream_id`` attributes (and, with placement "device", device strings,
which survive grappler's fusions). The input is never touched; the output appears whole or
not at all (built beside it, then swapped into place: see msopt.files.outputs).
"""

import shutil
from pathlib import Path

from msopt.files import output_guard, outputs
from msopt.graph import protos
from msopt.graph.view import MAIN, STREAM_ATTR, node_key

SKIPPED_FILES = {"saved_model.pb", "saved_model.pbtxt", "fingerprint.pb"}  # fingerprint would be stale


def default_output(model_path, streams):
    """``<input>_ms<N>``, beside the input (keeping a file's extension)."""
    path = Path(model_path)
    if path.is_dir():
        return path.parent / f"{path.name}_ms{streams}"
    return path.with_name(f"{path.stem}_ms{streams}{path.suffix}")


def check_output(model, out, force):
    """Refuse an output that msopt.files.output_guard refuses for the model ``model``: checked again right before writing."""
    output_guard.check([model.path], [output_guard.Output("-o", out, "model")], force)


def device_name(device_type, stream):
    """Stream k's device: k-th device of ``device_type`` ("cpu"/"gpu"), or a msopt.runner.gpu_layout.GpuLayout's choice."""
    if not isinstance(device_type, str):
        return device_type.device_name(stream)
    return f"/device:{device_type.upper()}:{stream}"


def rewrite_meta_graph(out, partition, placement="attr", device_type="gpu", const_copies=None, view=None):
    """``out`` (a MetaGraphDef, changed in place) made to carry the partition; nodes outside it lose any _stream_id.

    ``const_copies`` ({Const key: [streams]}, from msopt.planning.const_copies) adds one copy of
    each listed Const per stream, consumed by that stream's nodes instead of the original. ``view`` (the
    GraphView of ``out`` as it was read) finds their consumers without reading every node.
    """
    graph = out.graph_def
    _assign(graph.node, MAIN, partition, placement, device_type, view)
    for fdef in graph.library.function:
        _assign(fdef.node_def, fdef.signature.name, partition, placement, device_type, view)
    if const_copies:
        _copy_consts(graph, partition, const_copies, placement, device_type, view)
    if placement == "device":
        _place_captured_variables(out, partition, device_type)
    return out


def copy_name(name, stream):
    return f"{name}/_ms_copy_{stream}"


def _copy_consts(graph, partition, copies, placement, device_type, view=None):
    wanted_in = {}  # function -> {Const name: streams}
    for key, streams in copies.items():
        function, _, name = key.rpartition(":")  # node names hold no ':'
        wanted_in.setdefault(function, {})[name] = streams
    bodies = [(MAIN, graph.node)] + [(f.signature.name, f.node_def) for f in graph.library.function]
    for function, node_defs in bodies:
        wanted = wanted_in.get(function)
        if not wanted:
            continue
        prefix = node_key(function, "")
        readers, originals = (node_defs, {}) if view is None else _readers(view, function, prefix, wanted, node_defs)
        for consumer in readers:
            name = consumer.name
            if view is None and name in wanted:
                originals[name] = consumer
            stream = partition.get(prefix + name)
            if stream is None:
                continue
            inputs = consumer.input
            for i, ref in enumerate(inputs):
                source = ref.split(":")[0]
                if stream in wanted.get(source, ()):
                    inputs[i] = copy_name(source, stream) + ref[len(source) :]
        for name, original in originals.items():  # a Const reads nothing: the original is unchanged above
            for stream in wanted[name]:
                node = node_defs.add()
                node.CopyFrom(original)
                node.name = copy_name(name, stream)
                node.attr[STREAM_ATTR].i = stream
                if placement == "device":
                    node.device = device_name(device_type, stream)


def _readers(view, function, prefix, wanted, node_defs):
    """(the NodeDefs of a body that may read one of its ``wanted`` Consts, {Const name: its NodeDef} in the body's
    order), found from the view's edges instead of reading every NodeDef: the view lists a body's nodes in NodeDef
    order, and every node naming a Const among its inputs is among the Const's consumers."""
    body = view.bodies[function]
    position = {node.key: i for i, node in enumerate(body)}
    consts = sorted(position[prefix + name] for name in wanted)
    readers = sorted({position[c] for i in consts for c in body[i].outputs if c in position})
    return [node_defs[i] for i in readers], {body[i].name: node_defs[i] for i in consts}


def _place_captured_variables(meta, partition, device_type):
    """TF2: write each captured variable's stream device into the object graph (SavedVariable.device).

    Stock tf.saved_model.load honours it only with LoadOptions(experimental_variable_policy=
    SAVE_VARIABLE_DEVICES) and soft device placement on; otherwise the variable lands on the
    default device and TensorFlow silently moves the ops reading it there.
    """
    objects = meta.object_graph_def
    if not objects.nodes:
        return
    handles = {nd.name for nd in meta.graph_def.node if nd.op == "VarHandleOp"}
    for nd in meta.graph_def.node:
        function = nd.attr["f"].func.name if "f" in nd.attr else nd.op
        if function not in objects.concrete_functions:
            continue
        bound = objects.concrete_functions[function].bound_inputs  # object ids of the captured inputs, in order
        data = [ref for ref in nd.input if not ref.startswith("^")]
        for ref, object_id in zip(data[len(data) - len(bound) :], bound):
            source = ref.split(":")[0]
            target = objects.nodes[object_id]
            if source in handles and source in partition and target.WhichOneof("kind") == "variable":
                target.variable.device = device_name(device_type, partition[source])


def _assign(node_defs, function, partition, placement, device_type, view=None):
    if view is not None:  # the view's keys of the body's nodes, in NodeDef order: no name read from the NodeDefs
        keys = [node.key for node in view.bodies.get(function, ())]
    else:
        keys = [node_key(function, nd.name) for nd in node_defs]
    for nd, key in zip(node_defs, keys, strict=True):
        stream = partition.get(key)
        if stream is None:
            if STREAM_ATTR in nd.attr:
                del nd.attr[STREAM_ATTR]
            continue
        nd.attr[STREAM_ATTR].i = stream
        if placement == "device":
            nd.device = device_name(device_type, stream)


def write(
    model, partition, out, placement="attr", device_type="gpu", force=False, const_copies=None, check=None, view=None
):
    """Write ``model`` with ``partition`` applied to ``out``; returns the path written. ``view``, the model's GraphView,
    if the caller has it: the Const copies' consumers are read from it.

    ``check(path)``, when given, sees the complete model before it reaches ``out``: unless it returns
    true, nothing is written (an existing ``out`` stays as it was) and the result is None.
    """
    out = Path(out)
    check_output(model, out, force)
    whole = model.copy()  # the file's message, rewritten in place: nothing copied twice
    meta = whole.meta_graphs[model.index] if model.format == "saved_model" else whole
    rewrite_meta_graph(meta, partition, placement, device_type, const_copies, view)
    with outputs.staged(out) as built:
        if model.format == "saved_model":
            built.mkdir()
            _write_saved_model(model, whole, built)
        else:
            message = meta if model.format == "meta_graph" else meta.graph_def
            data = protos.to_text(message).encode() if model.text else message.SerializeToString(deterministic=True)
            built.write_bytes(data)
        if check is not None and not check(built):
            return None
        outputs.put(built, out, force)
    return out


def _write_saved_model(model, saved, tmp):
    for item in Path(model.path).iterdir():
        if item.name in SKIPPED_FILES or item.name == output_guard.MARKER:
            continue
        target = tmp / item.name
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, target)
    name = "saved_model.pbtxt" if model.text else "saved_model.pb"
    data = (
        protos.to_text(saved).encode() if model.text else saved.SerializeToString(deterministic=True)
    )  # map order fixed
    (tmp / name).write_bytes(data)
    output_guard.mark(tmp)
