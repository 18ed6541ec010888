"""A partition maps node keys to stream ids; this module checks and summarizes one.

Nodes absent from a partition run on the default stream 0 and keep their device.
"""

from msopt.errors import InputError
from msopt.graph.view import MAIN


def check_range(partition, streams, source="the existing _stream_id attribute"):
    """Raise InputError naming the first node whose stream is outside [0, streams) and where it came from."""
    if _plain_in_range(partition.values(), streams):
        return
    for key, stream in partition.items():
        if not isinstance(stream, int) or not 0 <= stream < streams:
            raise InputError(
                f"node '{key}' gets stream {stream} from {source}, outside [0, {streams}) for --streams {streams}"
            )


def _plain_in_range(values, streams):
    """Whether every value is a plain int (or bool) in [0, streams): the types in one pass, the bounds on an array
    (a million-key plan in a tenth of the loop's time). False leaves the answer to the loop."""
    if not values:
        return True
    if not set(map(type, values)) <= {int, bool}:
        return False
    import numpy as np

    try:
        array = np.fromiter(values, np.int64, len(values))
    except OverflowError:
        return False
    return bool(array.min() >= 0 and array.max() < streams)


def summarize(view, partition, streams):
    """The report's partition figures: per stream, per function, and the edges between streams."""
    total = _Tally(streams)
    per_function = {}
    get = partition.get
    nodes = view.nodes
    for function, body in view.bodies.items():  # a virtual node (a function argument) reads nothing
        if not body:
            continue
        tally = per_function[function] = _Tally(streams)
        counts = tally.nodes
        cross = cross_control = 0
        for node in body:  # counted in locals, added to the tallies once per body
            stream = get(node.key, 0)
            counts[stream] += 1
            for src, _ in node.inputs:
                if get(src, 0) != stream and nodes[src].proto is not None:
                    cross += 1
            for src in node.control_inputs:
                if get(src, 0) != stream and nodes[src].proto is not None:
                    cross_control += 1
        tally.cross, tally.cross_control = cross + cross_control, cross_control
        total.cross += tally.cross
        total.cross_control += cross_control
        total.nodes = [a + b for a, b in zip(total.nodes, counts)]
        total.assigned += sum(1 for node in body if node.key in partition)
    functions = {name: t.as_dict() for name, t in per_function.items() if name != MAIN}
    main = per_function.get(MAIN) or _Tally(streams)
    return {
        "streams": streams,
        "nodes": sum(total.nodes),
        "assigned_nodes": total.assigned,
        "nodes_per_stream": total.nodes,
        "cross_stream_edges": total.cross,
        "cross_stream_control_edges": total.cross_control,
        "main_graph": main.as_dict(),
        "functions": functions,
    }


class _Tally:
    def __init__(self, streams):
        self.nodes = [0] * streams
        self.assigned = 0
        self.cross = 0
        self.cross_control = 0

    def as_dict(self):
        return {"nodes": sum(self.nodes), "nodes_per_stream": self.nodes, "cross_stream_edges": self.cross}
