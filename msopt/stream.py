"""msopt.stream(i): DeepRec's tf.stream() for tf.compat.v1 graphs on stock TensorFlow, and the session setup to run it.

    with msopt.stream(0):                 # ops created here get _stream_id = 0
        a = tf.compat.v1.placeholder(tf.float32, [None, 1])
        with msopt.stream(1):             # nestable: the innermost block wins
            b = tf.compat.v1.placeholder(tf.float32, [None, 1])
    with tf.compat.v1.colocate_with(a):   # an op colocated with a takes a's stream
        d = tf.constant([5.0])

Stock TensorFlow ignores ``_stream_id``. DeepRec turns stream k into virtual GPU k after
placement; ``place(graph)`` does the same before the session starts (after msopt's placement
constraints), and ``session_config(n)`` builds the ConfigProto with the N devices that a
DeepRec user asks for with ``use_multi_stream`` and ``multi_stream_num``.

The module itself is callable, so ``msopt.stream(i)`` and ``from msopt.stream import stream``
are the same thing. TensorFlow is imported only when a function here runs.
"""
import contextlib
import functools
import subprocess
import sys
import types

from msopt.graph import STREAM_ATTR

_STACK = "_msopt_stream_stack"  # attribute holding the open stream blocks of a tf.Graph


@contextlib.contextmanager
def stream(stream_id, graph=None):
    """Ops created in this block (in ``graph``, default: the default graph) get ``_stream_id = stream_id``."""
    if not isinstance(stream_id, int) or isinstance(stream_id, bool) or stream_id < 0:
        raise ValueError(f"stream id must be an integer >= 0, got {stream_id!r}")
    if graph is None:
        import tensorflow as tf

        graph = tf.compat.v1.get_default_graph()
    blocks = _blocks(graph)
    blocks.append(stream_id)
    try:
        yield stream_id
    finally:
        blocks.pop()


def _blocks(graph):
    """The graph's stack of open stream blocks; installs the per-op hook on first use."""
    blocks = getattr(graph, _STACK, None)
    if blocks is None:
        blocks = []
        setattr(graph, _STACK, blocks)
        # TensorFlow calls a callable in the graph's attribute-scope map for every new op.
        graph._attr_scope_map[STREAM_ATTR] = functools.partial(_stream_of_new_op, graph)
    return blocks


def _stream_of_new_op(graph, node_def):
    """A new op's stream: that of the op it is colocated with, else the innermost open block."""
    from tensorflow.core.framework.attr_value_pb2 import AttrValue

    for op in graph._colocation_stack.peek_objs():
        try:
            return AttrValue(i=op.get_attr(STREAM_ATTR))
        except (ValueError, AttributeError):
            continue
    blocks = getattr(graph, _STACK)
    return AttrValue(i=blocks[-1]) if blocks else None


def place(graph=None, streams=None, device_type="gpu"):
    """Put each op with a stream on that stream's device, after msopt's placement constraints.

    Call it once the graph is built and before the Session runs it. Returns the constraint
    merges (ops moved so that TensorFlow can place the graph as written).
    """
    import tensorflow as tf

    from msopt import constraints, protos
    from msopt.emit import device_name
    from msopt.graph import GraphView

    graph = graph or tf.compat.v1.get_default_graph()
    view = GraphView(protos.GraphDef.FromString(graph.as_graph_def().SerializeToString()))
    partition = {n.key: n.stream for n in view.real_nodes() if n.stream is not None}
    if streams is not None:
        for key, stream_id in partition.items():
            if stream_id >= streams:
                raise ValueError(f"op '{key}' is on stream {stream_id}, outside [0, {streams})")
    plan, merges = constraints.apply(view, partition, streams or max(partition.values(), default=0) + 1)
    for op in graph.get_operations():
        stream_id = plan.get(op.name)
        if stream_id is not None:
            op._set_attr(STREAM_ATTR, tf.compat.v1.AttrValue(i=stream_id))
            op._set_device(device_name(device_type, stream_id))
    return merges


def session_config(multi_stream_num, use_multi_stream=True, device_type="gpu", config=None, memory_limit_mb=None):
    """The stock-TensorFlow ConfigProto for DeepRec's ``use_multi_stream`` / ``multi_stream_num``.

    DeepRec gives each stream a virtual GPU; so does this: ``multi_stream_num`` virtual GPUs
    on the first GPU (each ``memory_limit_mb``, default an equal share of 90% of its memory),
    or ``multi_stream_num`` CPU devices with ``device_type="cpu"``. ``config`` is copied, not changed.
    """
    import tensorflow as tf

    result = tf.compat.v1.ConfigProto()
    if config is not None:
        result.CopyFrom(config)
    if not use_multi_stream:
        return result
    if not isinstance(multi_stream_num, int) or multi_stream_num < 1:
        raise ValueError(f"multi_stream_num must be an integer >= 1, got {multi_stream_num!r}")
    if device_type == "cpu":
        result.device_count["CPU"] = multi_stream_num
        return result
    if memory_limit_mb is None:
        memory_limit_mb = int(0.9 * _gpu_memory_mb() / multi_stream_num)
    virtual = result.gpu_options.experimental.virtual_devices.add()
    virtual.memory_limit_mb.extend([float(memory_limit_mb)] * multi_stream_num)
    return result


def _gpu_memory_mb():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return float(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        raise RuntimeError("cannot read the GPU's memory size with nvidia-smi: pass memory_limit_mb") from None


class _CallableModule(types.ModuleType):
    """Lets ``msopt.stream(i)`` work whether ``msopt.stream`` names this module or the function."""

    def __call__(self, stream_id, graph=None):
        return stream(stream_id, graph)


sys.modules[__name__].__class__ = _CallableModule
