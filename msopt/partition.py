"""A partition maps node keys to stream ids; this module checks and summarizes one.

Nodes absent from a partition run on the default stream 0 and keep their device.
"""

from collections import defaultdict
from operator import itemgetter

from msopt.errors import InputError
from msopt.graph import MAIN


def check_range(partition, streams, source="the existing _stream_id attribute"):
    """Raise InputError naming the first node whose stream is outside [0, streams) and where it came from."""
    for key, stream in partition.items():
        if not isinstance(stream, int) or not 0 <= stream < streams:
            raise InputError(
                f"node '{key}' gets stream {stream} from {source}, outside [0, {streams}) for --streams {streams}"
            )


def summarize(view, partition, streams):
    """The report's partition figures: per stream, per function, and the edges between streams."""
    total = _Tally(streams)
    per_function = defaultdict(lambda: _Tally(streams))
    stream_of = partition.get
    nodes = view.nodes
    for node in view.real_nodes():  # a virtual node (a function argument) reads nothing
        stream = stream_of(node.key, 0)
        tally = per_function[node.function]
        total.nodes[stream] += 1
        tally.nodes[stream] += 1
        total.assigned += node.key in partition
        for sources, is_control in ((map(itemgetter(0), node.inputs), False), (node.control_inputs, True)):
            for src in sources:
                if stream_of(src, 0) != stream and nodes[src].proto is not None:
                    for t in (total, tally):
                        t.cross += 1
                        t.cross_control += is_control
    functions = {name: t.as_dict() for name, t in per_function.items() if name != MAIN}
    return {
        "streams": streams,
        "nodes": sum(total.nodes),
        "assigned_nodes": total.assigned,
        "nodes_per_stream": total.nodes,
        "cross_stream_edges": total.cross,
        "cross_stream_control_edges": total.cross_control,
        "main_graph": per_function[MAIN].as_dict(),
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
