"""Write a partitioned model: the only module that writes models.

Stream ids become ``_stream_id`` attributes (and, with placement "device", device strings,
which survive grappler's fusions). The input is never touched; the output appears whole or
not at all (built in a temporary sibling, then renamed into place).
"""
import os
import shutil
import tempfile
from pathlib import Path

from msopt import protos
from msopt.errors import InputError
from msopt.graph import MAIN, STREAM_ATTR, node_key

SKIPPED_FILES = {"saved_model.pb", "saved_model.pbtxt", "fingerprint.pb"}  # fingerprint would be stale


def default_output(model_path, streams):
    """``<input>_ms<N>``, beside the input (keeping a file's extension)."""
    path = Path(model_path)
    if path.is_dir():
        return path.parent / f"{path.name}_ms{streams}"
    return path.with_name(f"{path.stem}_ms{streams}{path.suffix}")


def check_output(model, out, force):
    """Refuse outputs that would overwrite or sit inside the input, or exist without force."""
    src, dst = Path(model.path).resolve(), Path(out).resolve()
    if dst == src or (model.format == "saved_model" and src in dst.parents):
        raise InputError(f"{out}: the output would overwrite the input model")
    if dst.exists() and not force:
        raise InputError(f"{out}: output already exists (use --force to replace it)")
    if not dst.parent.is_dir():
        raise InputError(f"{out}: parent directory does not exist")


def device_name(device_type, stream):
    return f"/device:{device_type.upper()}:{stream}"


def rewrite_meta_graph(meta_graph, partition, placement="attr", device_type="gpu"):
    """A copy of ``meta_graph`` carrying the partition; nodes outside it lose any _stream_id."""
    out = protos.MetaGraphDef.FromString(meta_graph.SerializeToString())
    graph = out.graph_def
    _assign(graph.node, MAIN, partition, placement, device_type)
    for fdef in graph.library.function:
        _assign(fdef.node_def, fdef.signature.name, partition, placement, device_type)
    return out


def _assign(node_defs, function, partition, placement, device_type):
    for nd in node_defs:
        stream = partition.get(node_key(function, nd.name))
        if stream is None:
            if STREAM_ATTR in nd.attr:
                del nd.attr[STREAM_ATTR]
            continue
        nd.attr[STREAM_ATTR].i = stream
        if placement == "device":
            nd.device = device_name(device_type, stream)


def write(model, partition, out, placement="attr", device_type="gpu", force=False):
    """Write ``model`` with ``partition`` applied to ``out``; returns the path written."""
    out = Path(out)
    check_output(model, out, force)
    meta = rewrite_meta_graph(model.meta_graph, partition, placement, device_type)
    if model.format == "saved_model":
        saved = protos.SavedModel()
        saved.CopyFrom(model.saved_model)
        saved.meta_graphs[model.index].CopyFrom(meta)
        _replace_dir(out, lambda tmp: _write_saved_model(model, saved, tmp), force)
    else:
        message = meta if model.format == "meta_graph" else meta.graph_def
        data = protos.to_text(message).encode() if model.text else message.SerializeToString()
        _replace_file(out, data, force)
    return out


def _write_saved_model(model, saved, tmp):
    for item in Path(model.path).iterdir():
        if item.name in SKIPPED_FILES:
            continue
        target = tmp / item.name
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, target)
    name = "saved_model.pbtxt" if model.text else "saved_model.pb"
    data = protos.to_text(saved).encode() if model.text else saved.SerializeToString()
    (tmp / name).write_bytes(data)


def _replace_dir(out, fill, force):
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        fill(tmp)
        _move_into_place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_file(out, data, force):
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        _move_into_place(Path(tmp), out, force)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _move_into_place(tmp, out, force):
    if out.exists() or out.is_symlink():
        if not force:
            raise InputError(f"{out}: output already exists (use --force to replace it)")
        if out.is_dir() and not out.is_symlink():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
            return
    os.replace(tmp, out)
