"""Builders of malformed models and rules files, each made from a sample model at test time."""

from pathlib import Path

from click.testing import CliRunner
from conftest import SAMPLES

from msopt.cli import main
from msopt.graph import protos

LINREG_TEXT = SAMPLES / "linreg_frozen.pbtxt"


def cli(*args):
    """Run the command line in this process: (exit code, stdout, stderr lines that are not blank)."""
    result = CliRunner().invoke(main, [str(a) for a in args], prog_name="msopt", catch_exceptions=False)
    return result.exit_code, result.stdout, [line for line in result.stderr.splitlines() if line.strip()]


def edited_linreg(out_dir, name, old, new, count=1):
    """linreg_frozen.pbtxt with ``old`` replaced by ``new`` (``count`` times, -1 for all)."""
    text = LINREG_TEXT.read_text()
    assert old in text, old
    path = Path(out_dir) / name
    path.write_text(text.replace(old, new, count))
    return path


def bad_port(out_dir):
    """D2: a non-numeric output port in a main-graph input."""
    return edited_linreg(out_dir, "badport.pbtxt", 'input: "weight_x"\n', 'input: "weight_x:abc"\n')


def huge_shape(out_dir):
    """D3: a placeholder of 20 dimensions of 2^62 (its element count overflows a float)."""
    return edited_linreg(out_dir, "huge.pbtxt", "size: -1", "size: 4611686018427387904 } dim { " * 20 + "size: 1")


def wrong_rank(out_dir):
    """D4: a rank-1 _output_shapes on a Const that a MatMul reads."""
    return edited_linreg(
        out_dir,
        "rank.pbtxt",
        'name: "weight_y"\n  op: "Const"\n',
        'name: "weight_y"\n  op: "Const"\n'
        '  attr { key: "_output_shapes" value { list { shape { dim { size: 7 } } } } }\n',
    )


def float_stream_id(out_dir, value="f: 1.0"):
    """D13: a _stream_id stored as a float (or whatever ``value`` says)."""
    return edited_linreg(out_dir, "stream_bad.pbtxt", "      i: 1\n", f"      {value}\n", -1)


def linreg_graph():
    return protos.GraphDef.FromString((SAMPLES / "linreg_frozen.pb").read_bytes())


def write_graph(graph, out_dir, name):
    path = Path(out_dir) / name
    path.write_bytes(graph.SerializeToString())
    return path


def nested_calls(out_dir, depth):
    """D5: ``depth`` functions each calling the next, the first called from the main graph."""
    graph = linreg_graph()
    for i in range(depth):
        fdef = graph.library.function.add()
        fdef.signature.name = f"deep_fn_{i}"
        fdef.signature.input_arg.add(name="x", type=1)
        fdef.signature.output_arg.add(name="y", type=1)
        nd = fdef.node_def.add(input=["x"])
        if i < depth - 1:
            nd.name, nd.op = "call", "PartitionedCall"
            nd.attr["f"].func.name = f"deep_fn_{i + 1}"
            nd.attr["Tin"].list.type.append(1)
            nd.attr["Tout"].list.type.append(1)
            fdef.ret["y"] = "call:output:0"
        else:
            nd.name, nd.op = "id", "Identity"
            nd.attr["T"].type = 1
            fdef.ret["y"] = "id:output:0"
    root = graph.node.add(name="deep_call_root", op="PartitionedCall", input=["X"])
    root.attr["f"].func.name = "deep_fn_0"
    root.attr["Tin"].list.type.append(1)
    root.attr["Tout"].list.type.append(1)
    return write_graph(graph, out_dir, f"calls_{depth}.pb")


def node(graph, name):
    return next(n for n in graph.node if n.name == name)


def cyclic(out_dir):
    """D13: Add reads z, and z reads Add."""
    graph = linreg_graph()
    node(graph, "Add").input.append("^z")
    return write_graph(graph, out_dir, "cycle.pb")


def dangling(out_dir):
    graph = linreg_graph()
    node(graph, "z").input[1] = "ghost"
    return write_graph(graph, out_dir, "dangling.pb")


def duplicate_name(out_dir):
    graph = linreg_graph()
    graph.node.add().CopyFrom(node(graph, "MatMul"))
    return write_graph(graph, out_dir, "duplicate.pb")


def missing_function(out_dir):
    graph = linreg_graph()
    call = graph.node.add(name="call", op="StatefulPartitionedCall", input=["X"])
    call.attr["f"].func.name = "no_such_function"
    return write_graph(graph, out_dir, "missing_fn.pb")


def invalid_dtype(out_dir):
    graph = linreg_graph()
    node(graph, "MatMul").attr["T"].type = 0
    return write_graph(graph, out_dir, "dtype0.pb")


# -- rules files ------------------------------------------------------------------------------------
RULES = {  # D6: name -> bytes
    "nonutf8.yaml": b'rules:\n  - scope: "tower_\xff1/"\n    stream: 1\n',
    "utf16.yaml": "rules:\n  - scope: tower_1/\n    stream: 1\n".encode("utf-16"),
    "pyname.yaml": b"rules:\n  - scope: tower_1/\n    stream: !!python/name:os.system\n",
    "inttag.yaml": b'rules:\n  - scope: tower_1/\n    stream: !!int "abc"\n',
    "nest.yaml": b"rules: " + b"[" * 20000 + b"]" * 20000 + b"\n",
    "nul.yaml": b'rules:\n  - scope: "tower_1/\x00"\n    stream: 1\n',
}


def rules_file(out_dir, name, data):
    path = Path(out_dir) / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def many_rules(count):
    """A rules file of ``count`` rules, none of which matches anything."""
    return "rules:\n" + "".join(f"  - match: 'no_such_node_{i}/.*'\n    stream: 1\n" for i in range(count))


def captured_object_out_of_range(out_dir):
    """A TF2 SavedModel whose functions capture object ids beyond its object graph."""
    saved = protos.SavedModel.FromString((SAMPLES / "linreg_tf2" / "saved_model.pb").read_bytes())
    objects = saved.meta_graphs[0].object_graph_def
    for name in objects.concrete_functions:
        bound = objects.concrete_functions[name].bound_inputs
        if bound:
            bound[0] = 10**6
    model = Path(out_dir) / "captures"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(saved.SerializeToString())
    return model
