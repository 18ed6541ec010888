"""What the graph says each signature input must hold: id bounds, scalar predicates, string formats (protos only).

An input is followed forward through the ops that pass its values on unchanged (casts, reshapes,
slices, control flow, function calls and returns) to the ops that constrain them: a gather or
lookup reading a table (ids below its row count), ``OneHot`` (its depth), ``FloorMod`` (its modulus),
a range assertion (``x < c`` or ``c > max(x)``), a control-flow predicate (a scalar), and the string parsers.
The op tables are in ``ops``, what constants, variables and recorded shapes say in ``sources``, the walk in ``flow``.
"""

from msopt.graph.input_needs.flow import Flow
from msopt.graph.input_needs.need import Need

__all__ = ["Need", "input_needs"]


def input_needs(view, inputs):
    """{input key: Need} for a signature's inputs ({key: spec with a tensor 'name'})."""
    flow = Flow(view)
    needs = {}
    for key, spec in inputs.items():
        node = str(spec.get("name") or "").split(":")[0]
        need = Need()
        if node in view.nodes:
            port = int(str(spec["name"]).partition(":")[2] or 0)
            flow.follow(need, node, port)
            if spec.get("shape") is None and not need.scalar:
                need.shape = flow.shape_wanted(node, port)
        needs[key] = need
    return needs
