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


def parse_text(text, message):
    """Parse protobuf text format into ``message`` (raises text_format.ParseError)."""
    return text_format.Parse(text, message, allow_unknown_field=False)


def to_text(message):
    return text_format.MessageToString(message)
