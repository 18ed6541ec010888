"""Folded pictures of a partition: a signature's ops, name scopes folded into boxes coloured by stream, as DOT.

Three steps, each a function of its own module: ``signature_ops`` (ops.py) lists the ops one
signature runs (TF2 function calls opened: a called body is inlined under the call node's scope),
``fold`` (fold.py) turns name scopes into boxes (open to ``depth`` levels, plus the scopes named
by ``expand``; an open scope with too many members is cut into stages along the data flow),
``to_dot`` (dot.py) draws boxes, aggregated edges and the legend, and ``render`` runs graphviz.
"""

from msopt.visualize.dot import DotMissing, legend_rows, render, stream_color, to_dot
from msopt.visualize.fold import MAX_MEMBERS, Box, fold
from msopt.visualize.ops import Op, op_streams, signature_ops

__all__ = [
    "Box",
    "DotMissing",
    "MAX_MEMBERS",
    "Op",
    "fold",
    "legend_rows",
    "op_streams",
    "render",
    "signature_ops",
    "stream_color",
    "to_dot",
]
