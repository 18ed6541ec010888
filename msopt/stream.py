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
import sys
import types

from msopt.graph.view import STREAM_ATTR

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


def place(graph=None, streams=None, device_type="gpu", gpus=None):
    """Put each op with a stream on that stream's device, after msopt's placement constraints.

    Call it once the graph is built and before the Session runs it. Returns the constraint
    merges (ops moved so that TensorFlow can place the graph as written). On GPUs, stream k runs
    on GPU k mod ``gpus`` (default: every GPU this process sees), on the virtual device
    ``session_config`` made for it there: pass both the same ``gpus``.
    """
    import tensorflow as tf

    from msopt.emit import device_name
    from msopt.graph import protos
    from msopt.graph.view import GraphView
    from msopt.planning import constraints

    graph = graph or tf.compat.v1.get_default_graph()
    view = GraphView(protos.GraphDef.FromString(graph.as_graph_def().SerializeToString()))
    partition = {n.key: n.stream for n in view.real_nodes() if n.stream is not None}
    if streams is not None:
        for key, stream_id in partition.items():
            if stream_id >= streams:
                raise ValueError(f"op '{key}' is on stream {stream_id}, outside [0, {streams})")
    count = streams or max(partition.values(), default=0) + 1
    plan, merges = constraints.apply(view, partition, count)
    devices = device_type
    if device_type == "gpu":
        from msopt.runner.gpu_layout import GpuLayout

        devices = GpuLayout(count, _gpu_count(gpus))
    for op in graph.get_operations():
        stream_id = plan.get(op.name)
        if stream_id is not None:
            op._set_attr(STREAM_ATTR, tf.compat.v1.AttrValue(i=stream_id))
            op._set_device(device_name(devices, stream_id))
    return merges


def session_config(
    multi_stream_num, use_multi_stream=True, device_type="gpu", config=None, memory_limit_mb=None, gpus=None
):
    """The stock-TensorFlow ConfigProto for DeepRec's ``use_multi_stream`` / ``multi_stream_num``.

    DeepRec gives each stream a virtual GPU; so does this, over ``gpus`` GPUs (default: every GPU
    this process sees, CUDA_VISIBLE_DEVICES honoured): one ``VirtualDevices`` entry per GPU, each
    with ceil(multi_stream_num / gpus) devices (stream k on GPU k mod gpus, see msopt.runner.gpu_layout),
    and ``visible_device_list`` naming those GPUs. Each device gets ``memory_limit_mb`` (default an
    equal share of 90% of its GPU's memory, read as msopt.runner.gpu_inventory does). With
    ``device_type="cpu"``: ``multi_stream_num`` CPU devices. ``config`` is copied, not changed.

    Run it, and create the Session from it, before any eager op touches a GPU: TensorFlow creates
    its GPU devices once per process, and a later Session asking for other virtual devices fails.
    """
    import tensorflow as tf

    from msopt.runner.gpu_layout import per_gpu

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
    count = _gpu_count(gpus)
    each = per_gpu(multi_stream_num, count)
    if memory_limit_mb is None:
        limits = [int(0.9 * total / each) for total in _gpu_memory_mb(count)]
    else:
        limits = [memory_limit_mb] * count
    del result.gpu_options.experimental.virtual_devices[:]
    for limit in limits:
        result.gpu_options.experimental.virtual_devices.add().memory_limit_mb.extend([float(limit)] * each)
    result.gpu_options.visible_device_list = ",".join(str(g) for g in range(count))
    return result


def _gpu_count(gpus):
    """``gpus`` if given, else the GPUs this process will see (at least 1, so a GPU-less machine keeps one entry)."""
    if gpus is not None:
        if not isinstance(gpus, int) or gpus < 1:
            raise ValueError(f"gpus must be an integer >= 1, got {gpus!r}")
        return gpus
    from msopt.runner.gpu_inventory import visible_gpus

    return max(1, len(visible_gpus()))


def _gpu_memory_mb(count):
    from msopt.errors import InputError
    from msopt.runner.gpu_inventory import memory_mb

    try:
        return memory_mb(count)
    except InputError as e:
        raise RuntimeError(f"cannot read the GPUs' memory size ({e}): pass memory_limit_mb") from None


class _CallableModule(types.ModuleType):
    """Lets ``msopt.stream(i)`` work whether ``msopt.stream`` names this module or the function."""

    def __call__(self, stream_id, graph=None):
        return stream(stream_id, graph)


sys.modules[__name__].__class__ = _CallableModule
