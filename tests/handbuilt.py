"""Hand-built graphs for rule tests: a GraphDef from a few lines of (name, op, inputs)."""

from msopt import protos
from msopt.graph import GraphView


def graph_def(spec):
    """spec: [(name, op, [input refs])]; inputs as in a NodeDef ('a', 'a:1', '^a')."""
    graph = protos.GraphDef()
    for name, op, inputs in spec:
        node = graph.node.add(name=name, op=op)
        node.input.extend(inputs)
    return graph


def view(spec):
    return GraphView(graph_def(spec))


def diamond():
    """a -> b, a -> c, b -> d, c -> d: two chains, two edges that must cross streams."""
    return view([("a", "Relu", []), ("b", "Relu", ["a"]), ("c", "Relu", ["a"]), ("d", "AddV2", ["b", "c"])])
