"""Open every exported TensorFlow model format into one Model: the protos, untouched.

SavedModel directories (binary or text, every MetaGraph), frozen GraphDefs (binary or
text) and MetaGraphDef files. Only protobuf is needed: ops need not be registered.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError
from google.protobuf.text_format import ParseError

from msopt.errors import InputError
from msopt.graph import protos
from msopt.graph.validate import validate, validate_objects

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
# Signatures TensorFlow uses internally to name an op, not tensors: not user signatures.
INTERNAL_SIGNATURES = ("__saved_model_init_op", "__saved_model_train_op")
DEFAULT_TAGS = ("serve",)


@dataclass
class Model:
    path: Path
    format: str  # "saved_model" | "graph_def" | "meta_graph"
    text: bool  # stored in protobuf text format
    meta_graph: object  # the selected MetaGraphDef (a GraphDef is wrapped in one)
    saved_model: object = None  # the whole SavedModel proto, for saved_model
    tags: tuple = ()
    tag_sets: list = field(default_factory=list)
    index: int = 0  # position of meta_graph in saved_model.meta_graphs
    data: bytes | None = field(default=None, repr=False)  # the binary file as read (None for text formats)

    @property
    def graph_def(self):
        return self.meta_graph.graph_def

    @property
    def signatures(self):
        """The user signatures: {name: SignatureDef}."""
        return {k: v for k, v in self.meta_graph.signature_def.items() if k not in INTERNAL_SIGNATURES}

    @property
    def is_tf2(self):
        """A TF2 SavedModel: it carries an object graph (functions, variables, signatures)."""
        return len(self.meta_graph.object_graph_def.nodes) > 0

    def copy(self):
        """A new copy of the whole file's message: the SavedModel, or the MetaGraphDef (a GraphDef wrapped in one).
        Parsed again from the bytes read, which upb does in about half the time of copying the parsed message."""
        whole = protos.SavedModel() if self.format == "saved_model" else protos.MetaGraphDef()
        if self.data is None:
            whole.CopyFrom(self.saved_model if self.format == "saved_model" else self.meta_graph)
        elif self.format == "graph_def":
            whole.graph_def.ParseFromString(self.data)
        else:
            whole.ParseFromString(self.data)
        return whole

    @property
    def proto_file(self):
        if self.format == "saved_model":
            return self.path / SAVED_MODEL_FILES[1 if self.text else 0]
        return self.path


def load(path, tags=None):
    """Load the model at ``path``; ``tags`` picks a SavedModel MetaGraph (default: serve)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_dir():
        model = _load_saved_model(path, tags)
    else:
        if tags:
            raise InputError(f"{path}: --tags applies only to SavedModel directories")
        model = _load_graph_file(path)
    _check(model)
    return model


def _read(path):
    """A model file's bytes: a regular file no larger than a protobuf message can be (msopt.files.reading's checks)."""
    from msopt.files.reading import MAX_MODEL_BYTES, open_regular

    with open_regular(path, "model", MAX_MODEL_BYTES) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            data = f.read(size + 1)  # one byte more than it claims shows a file still being written
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if len(data) > size:
        raise InputError(f"{path}: the model file grew while it was read; read it once it is complete")
    return data


def _parse(message, data, text, path, what):
    try:
        if text:
            protos.parse_text(data.decode("utf-8"), message)
        else:
            message.ParseFromString(data)
    except (DecodeError, ParseError, UnicodeDecodeError, RuntimeError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{path}: not a valid {what} ({'text' if text else 'binary'} protobuf): {detail}") from None
    return message


def _load_saved_model(path, tags):
    found = [path / name for name in SAVED_MODEL_FILES if (path / name).is_file()]
    if not found:
        raise InputError(f"{path}: not a TensorFlow model: a directory needs saved_model.pb or saved_model.pbtxt")
    proto_file = found[0]
    text = proto_file.suffix == ".pbtxt"
    data = _read(proto_file)
    saved = _parse(protos.SavedModel(), data, text, proto_file, "SavedModel")
    if not saved.meta_graphs:
        raise InputError(f"{proto_file}: SavedModel holds no MetaGraph")
    tag_sets = [tuple(mg.meta_info_def.tags) for mg in saved.meta_graphs]
    wanted = _split_tags(tags)
    if wanted is None:
        index = next(
            (i for i, t in enumerate(tag_sets) if set(t) == set(DEFAULT_TAGS)), 0 if len(tag_sets) == 1 else None
        )
        if index is None:
            raise InputError(f"{path}: several tag sets ({_show(tag_sets)}); choose one with --tags")
    else:
        index = next((i for i, t in enumerate(tag_sets) if set(t) == set(wanted)), None)
        if index is None:
            raise InputError(f"{path}: no MetaGraph with tags '{','.join(wanted)}'; available: {_show(tag_sets)}")
    binary = None if text else data
    return Model(path, "saved_model", text, saved.meta_graphs[index], saved, tag_sets[index], tag_sets, index, binary)


def _split_tags(tags):
    if tags is None:
        return None
    if isinstance(tags, str):
        tags = [t.strip() for t in tags.split(",") if t.strip()]
    return tuple(tags)


def _show(tag_sets):
    return "; ".join(",".join(t) or "(none)" for t in tag_sets)


def _load_graph_file(path):
    data = _read(path)
    text = path.suffix in (".pbtxt", ".txt", ".prototxt")
    if path.suffix == ".meta" or (text and path.stem.endswith(".meta")):
        meta = _parse(protos.MetaGraphDef(), data, text, path, "MetaGraphDef")
        return Model(path, "meta_graph", text, meta, tags=tuple(meta.meta_info_def.tags), data=None if text else data)
    meta = protos.MetaGraphDef()
    _parse(meta.graph_def, data, text, path, "GraphDef")
    if not text and _looks_like_meta_graph(meta.graph_def):
        # A binary MetaGraphDef under another extension parses as a GraphDef of garbage.
        meta = _parse(protos.MetaGraphDef(), data, False, path, "MetaGraphDef")
        return Model(path, "meta_graph", False, meta, tags=tuple(meta.meta_info_def.tags), data=data)
    return Model(path, "graph_def", text, meta, data=None if text else data)


def _looks_like_meta_graph(graph_def):
    return bool(graph_def.node) and not any(n.op for n in graph_def.node)


def _check(model):
    """Reject what would make TensorFlow abort or misbehave later: checked once, here."""
    graph = model.graph_def
    if not graph.node and not graph.library.function:
        raise InputError(f"{model.proto_file}: the graph is empty (truncated or not a TensorFlow graph?)")
    validate(graph, model.proto_file)
    validate_objects(model.meta_graph.object_graph_def, model.proto_file)
    names = {node.name for node in graph.node}
    for sig_name, sig in model.signatures.items():
        for kind, infos in (("input", sig.inputs), ("output", sig.outputs)):
            for key, info in infos.items():
                where = f"{model.path}: signature '{sig_name}' {kind} '{key}'"
                encoding = info.WhichOneof("encoding")
                if encoding is None:
                    raise InputError(f"{where} names no tensor")
                if encoding == "name":
                    if info.dtype == 0:
                        raise InputError(f"{where} has no dtype")
                    node_name = info.name.split(":")[0].lstrip("^")
                    if node_name not in names:
                        raise InputError(f"{where} names tensor '{info.name}', which is not in the graph")
                shape = info.tensor_shape
                if shape.dim and not shape.unknown_rank:  # the cost model sizes the inputs by it: refused, not guessed
                    why = protos.implausible_dims([d.size for d in shape.dim])
                    if why is not None:
                        raise InputError(f"{where}: tensor_shape {why}")


def open_model(path, tags=None):
    """(Model, GraphView) of the model at ``path``: what every command starts from."""
    from msopt.compiled.gc_pause import gc_paused
    from msopt.graph.view import GraphView

    with gc_paused():  # the checks and the view allocate a node object per NodeDef, none of them cyclic
        model = load(path, tags)
        return model, GraphView(model.graph_def)
