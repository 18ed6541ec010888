"""TensorFlow's model protos (SavedModel, MetaGraphDef, GraphDef, ...) without importing TensorFlow.

The schema is TensorFlow's own, stored as a FileDescriptorSet (tools/gen_schema.py) and
built into a private descriptor pool, so it never clashes with TensorFlow's classes when
both are loaded; the two exchange messages as bytes.
"""

from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

_SCHEMA = Path(__file__).resolve().parent / "proto" / "tf_schema.binpb"


def _build_classes():
    pool = descriptor_pool.DescriptorPool()
    for file_proto in descriptor_pb2.FileDescriptorSet.FromString(_SCHEMA.read_bytes()).file:
        pool.Add(file_proto)
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:  # protobuf < 4.22
        get_class = message_factory.MessageFactory(pool).GetPrototype
    return lambda name: get_class(pool.FindMessageTypeByName(name))


_class = _build_classes()
SavedModel = _class("tensorflow.SavedModel")
MetaGraphDef = _class("tensorflow.MetaGraphDef")
GraphDef = _class("tensorflow.GraphDef")
NodeDef = _class("tensorflow.NodeDef")
FunctionDef = _class("tensorflow.FunctionDef")
AttrValue = _class("tensorflow.AttrValue")
SignatureDef = _class("tensorflow.SignatureDef")
Example = _class("tensorflow.Example")

# tensorflow.DataType names, from the schema itself.
DTYPE_NAMES = {
    v.number: v.name[3:].lower()
    for v in SavedModel.DESCRIPTOR.file.pool.FindEnumTypeByName("tensorflow.DataType").values
    if v.name.startswith("DT_") and not v.name.endswith("_REF")
}


# Shapes as models record them. A dimension above MAX_DIM, or a shape of more than MAX_SHAPE_ELEMENTS elements
# (1 PiB of float32), describes no tensor any machine holds: such a size is a corrupt or hand-made proto, and
# counting with it overflows the int64 byte counts the cost model and the simulator keep.
MAX_DIM = 2**40
MAX_SHAPE_ELEMENTS = 2**48


def implausible_dims(dims):
    """Why the sizes ``dims`` (-1 or None: unknown) describe no real tensor, as words to follow a shape's name
    ("dimension 1 is ...", "[...] holds more than ..."), or None when they may."""
    elements = 1
    for k, d in enumerate(dims):
        if d is None or d == -1:
            continue
        if d < -1 or d > MAX_DIM:
            return f"dimension {k} is {d} (sizes are -1 for unknown, else 0 to 2^40)"
        elements *= d
        if elements > MAX_SHAPE_ELEMENTS:
            shown = ", ".join(map(str, dims[:8])) + (", ..." if len(dims) > 8 else "")
            return f"[{shown}] holds more than 2^48 elements"
    return None


def parse_text(text, message):
    """Parse protobuf text format into ``message`` (raises text_format.ParseError)."""
    return text_format.Parse(text, message, allow_unknown_field=False)


def to_text(message):
    return text_format.MessageToString(message)
