"""XLA clusters: the nodes XLA compiles into one executable, which runs on one device and so on one stream.

A cluster is recognized in each form TensorFlow writes it (attribute names from TensorFlow's
``xla_cluster_util``/``build_xla_ops_pass`` and ``def_function``):

- ``_XlaCompile`` / ``_XlaRun`` (and ``_XlaMerge``) ops of an auto-clustered graph: the compile
  op with every op consuming its result;
- nodes carrying ``_XlaCompile=True`` with an ``_XlaScope`` (``jit_scope``) or an
  ``_xla_compile_id``: one cluster per scope or id, inside one graph or function body
  (``_XlaCompile`` without either: every such node of that body);
- calls of functions compiled whole (``tf.function(jit_compile=True)``: ``_XlaMustCompile`` on
  the FunctionDef or on the call node, or an ``XlaLaunch`` of a function): the call with every
  node of the called body, nested calls included.

``XLA_LINKERS`` yield the (a, b) pairs that msopt.planning.links joins like any other link, each
``linker(view, nodes)`` from the real nodes ``nodes`` (whole bodies, in the view's order).
"""

from collections import defaultdict

COMPILE_OPS = frozenset({"_XlaCompile"})
RUN_OPS = frozenset({"_XlaRun", "_XlaMerge"})
LAUNCH_OPS = frozenset({"XlaLaunch", "_XlaLaunch", "XlaLaunchV2"})
MUST_COMPILE = "_XlaMustCompile"


def _flag(attrs, name):
    return name in attrs and attrs[name].WhichOneof("value") == "b" and attrs[name].b


def _compile_run_links(view, nodes):
    for node in [node for node in nodes if node.op in COMPILE_OPS or node.op in RUN_OPS]:
        if node.op in COMPILE_OPS:
            for out in node.outputs:
                if view.nodes[out].op in RUN_OPS:
                    yield node.key, out
        elif node.op in RUN_OPS:
            for out in node.outputs:
                if view.nodes[out].op in RUN_OPS:
                    yield node.key, out


def _attribute_links(view, nodes):
    clusters = defaultdict(list)
    for node in view.with_attr(nodes, "_xla_compile_id", "_XlaCompile"):
        attrs = node.proto.attr
        if "_xla_compile_id" in attrs:
            clusters[(node.function, "id", attrs["_xla_compile_id"].s)].append(node.key)
        elif _flag(attrs, "_XlaCompile"):
            scope = attrs["_XlaScope"].s if "_XlaScope" in attrs else b""
            clusters[(node.function, "scope", scope)].append(node.key)
    for members in clusters.values():
        for other in members[1:]:
            yield members[0], other


def _compiled_call_links(view, nodes):
    compiled = [(node, fn) for node in nodes if node.calls for fn in node.calls if _must_compile(view, node, fn)]
    for node, fn in compiled:
        for member in _body_nodes(view, fn):
            yield node.key, member


# The links of XLA clusters, in the order they join: (key, key) pairs of nodes that XLA compiles together.
XLA_LINKERS = (_compile_run_links, _attribute_links, _compiled_call_links)


def _must_compile(view, node, function):
    if node.op in LAUNCH_OPS or _flag(node.proto.attr, MUST_COMPILE):
        return True
    info = view.functions.get(function)
    return info is not None and _flag(info.proto.attr, MUST_COMPILE)


def _body_nodes(view, function):
    """Every node of ``function`` and of the functions it calls, each body once."""
    seen, pending, members = set(), [function], []
    while pending:
        fn = pending.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for node in view.bodies.get(fn, ()):
            members.append(node.key)
            pending.extend(node.calls)
    return members
