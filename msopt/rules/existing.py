"""Policy none: keep the _stream_id attributes already on the nodes (DeepRec's tf.stream, msopt.stream)."""


def keep_existing(view, options):
    return {node.key: node.stream for node in view.real_nodes() if node.stream is not None}
