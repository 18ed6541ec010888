"""What a model holds: format, tag sets, signatures, sizes, op types, streams and devices present."""

import re
from collections import Counter

from msopt.graph.protos import DTYPE_NAMES
from msopt.graph.view import MAIN


def tensor_spec(info):
    """dtype and shape of a signature TensorInfo (None for an unknown dimension or rank)."""
    shape = None if info.tensor_shape.unknown_rank else [d.size if d.size >= 0 else None for d in info.tensor_shape.dim]
    return {
        "name": info.name or info.WhichOneof("encoding"),
        "dtype": DTYPE_NAMES.get(info.dtype, str(info.dtype)),
        "shape": shape,
    }


def natural_key(text):
    """Sort C2 before C10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def signatures(model):
    return {
        name: {
            "method": sig.method_name,
            "inputs": {k: tensor_spec(sig.inputs[k]) for k in sorted(sig.inputs, key=natural_key)},
            "outputs": {k: tensor_spec(sig.outputs[k]) for k in sorted(sig.outputs, key=natural_key)},
        }
        for name, sig in sorted(model.signatures.items())
    }


def describe(model, view):
    real = list(view.real_nodes())
    streams = Counter(n.stream for n in real if n.stream is not None)
    devices = Counter(n.device for n in real if n.device)
    return {
        "path": str(model.path),
        "format": model.format + (" (text)" if model.text else ""),
        "tf2": model.is_tf2,
        "tags": list(model.tags),
        "tag_sets": [list(t) for t in model.tag_sets],
        "signatures": signatures(model),
        "main_graph_nodes": sum(1 for n in real if n.function == MAIN),
        "function_nodes": sum(1 for n in real if n.function != MAIN),
        "functions": len(view.functions),
        "op_types": dict(view.op_histogram().most_common()),
        "stream_ids": {str(k): v for k, v in sorted(streams.items())},
        "devices": dict(devices.most_common()),
    }


def format_text(info, top=15):
    """The human form of describe()'s document."""
    lines = [f"{info['path']}: {info['format']}" + (" (TF2)" if info["tf2"] else "")]
    if info["tag_sets"]:
        lines.append(
            f"  tag sets: {'; '.join(','.join(t) for t in info['tag_sets'])}  (selected: {','.join(info['tags'])})"
        )
    lines.append(
        f"  nodes: {info['main_graph_nodes']} in the main graph, {info['function_nodes']} in {info['functions']} functions"
    )
    for name, sig in info["signatures"].items():
        lines.append(f"  signature {name}:")
        for kind in ("inputs", "outputs"):
            for key, spec in sig[kind].items():
                lines.append(f"    {kind[:-1]:6} {key}: {spec['dtype']} {_shape(spec['shape'])}  ({spec['name']})")
    ops = list(info["op_types"].items())
    shown = ", ".join(f"{op} {n}" for op, n in ops[:top]) + (
        f", ... ({len(ops) - top} more types)" if len(ops) > top else ""
    )
    lines.append(f"  op types: {shown}")
    streams = ", ".join(f"{k}: {v} nodes" for k, v in info["stream_ids"].items()) or "none"
    lines.append(f"  _stream_id present: {streams}")
    devices = ", ".join(f"{k} ({v})" for k, v in info["devices"].items()) or "none"
    lines.append(f"  devices present: {devices}")
    return "\n".join(lines)


def _shape(shape):
    if shape is None:
        return "<unknown rank>"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
