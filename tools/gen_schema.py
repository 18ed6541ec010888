"""Regenerate msopt/graph/proto/tf_schema.binpb: TensorFlow's public model protos as a FileDescriptorSet.

Run with TensorFlow installed (it is the source of the schema); msopt itself reads
the set without TensorFlow.
"""

from pathlib import Path

from google.protobuf import descriptor_pb2


def main():
    from tensorflow.core.example import example_pb2
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    files = {}

    def add(fd):
        if fd.name in files:
            return
        for dep in fd.dependencies:
            add(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        files[fd.name] = proto

    add(graph_pb2.DESCRIPTOR)
    add(saved_model_pb2.DESCRIPTOR)
    add(example_pb2.DESCRIPTOR)  # tf.Example: what generated inputs of ParseExample ops hold
    out = descriptor_pb2.FileDescriptorSet(file=list(files.values()))
    target = Path(__file__).resolve().parent.parent / "msopt" / "graph" / "proto" / "tf_schema.binpb"
    target.write_bytes(out.SerializeToString())
    print(f"wrote {target} ({len(files)} files)")


if __name__ == "__main__":
    main()
