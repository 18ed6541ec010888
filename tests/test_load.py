"""Loading every format into one graph view, without TensorFlow."""

import subprocess
import sys

import pytest
from conftest import SAMPLES

from msopt.graph import protos
from msopt.graph.view import GraphView, node_key
from msopt.load import load

pytestmark = pytest.mark.tf


@pytest.mark.parametrize(
    "name, fmt, text",
    [
        ("linreg_tf1", "saved_model", False),
        ("linreg_tf2", "saved_model", False),
        ("linreg_frozen.pb", "graph_def", False),
        ("linreg_frozen.pbtxt", "graph_def", True),
        ("towers_tf1.meta", "meta_graph", False),
    ],
)
def test_every_format_loads(sample_view, name, fmt, text):
    model, view = sample_view(name)
    assert (model.format, model.text) == (fmt, text)
    matmuls = sum(1 for n in view.real_nodes() if n.op == "MatMul")
    # linreg: X@W_X and Y@W_Y (the TF2 form holds them in two traced functions); towers: 2 dense x 2 towers
    assert matmuls == {"linreg_tf2": 4, "towers_tf1.meta": 4}.get(name, 2)


def test_text_saved_model(tmp_path):
    saved = protos.SavedModel.FromString((SAMPLES / "linreg_tf1" / "saved_model.pb").read_bytes())
    (tmp_path / "saved_model.pbtxt").write_text(protos.to_text(saved))
    model = load(tmp_path)
    assert model.text and model.format == "saved_model"
    assert len(model.graph_def.node) == len(saved.meta_graphs[0].graph_def.node)


def test_one_view_for_tf1_and_tf2(sample_view):
    """The same rule (find the Y branch's MatMul and what feeds it) works on both forms."""
    for name in ("linreg_tf1", "linreg_tf2"):
        _, view = sample_view(name)
        matmuls = [n for n in view.real_nodes() if n.op == "MatMul"]
        assert len(matmuls) >= 2
        for mm in matmuls:
            assert len(mm.inputs) == 2
            assert all(src in view.nodes for src, _ in mm.inputs)
            assert mm.outputs, "a MatMul feeds something"


def test_function_bodies_edges_args_and_calls(sample_view):
    model, view = sample_view("towers_tf2")
    assert model.is_tf2
    callers = [n for n in view.real_nodes() if n.calls]
    assert callers, "TF2 main graph calls functions"
    for _name, info in view.functions.items():
        for arg in info.args:
            assert view.nodes[arg].virtual and view.nodes[arg].op == "_Arg"
        for src, _ in info.returns.values():
            assert src in view.nodes
    body_nodes = [n for n in view.real_nodes() if n.function]
    assert any(n.op == "Conv2D" for n in body_nodes)
    conv = next(n for n in body_nodes if n.op == "Conv2D")
    assert conv.key == node_key(conv.function, conv.name)
    # data edges inside a body come from args or body nodes
    assert any(view.nodes[src].virtual for n in body_nodes for src, _ in n.inputs)


def test_existing_stream_ids_seen_in_main_graph_and_functions(sample_view):
    _, v1 = sample_view("linreg_tf1")
    _, v2 = sample_view("linreg_tf2")
    assert {n.stream for n in v1.real_nodes()} == {None, 0, 1}
    assert {n.stream for n in v2.real_nodes() if n.function} >= {0, 1}


def test_unregistered_op_loads_without_tensorflow(sample_view):
    model, view = sample_view("custom_op_tf1")
    assert "MsoptTestUnregisteredOp" in view.op_histogram()


def test_loading_does_not_import_tensorflow():
    code = (
        "import sys; from msopt.load import load; from msopt.graph.view import GraphView; "
        f"m = load({str(SAMPLES / 'deepfm_tf2')!r}); GraphView(m.graph_def); "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_many_per_layer_functions(mobilenet_v2):
    model = load(mobilenet_v2)
    view = GraphView(model.graph_def)
    assert model.is_tf2
    assert len(view.functions) > 100
    assert sum(1 for n in view.real_nodes() if n.op == "Conv2D") >= 35


def test_bodies_and_op_index_keep_the_views_order(sample_view):
    """real_nodes walks the bodies (main graph first) in the view's order; of_ops picks from it by op type."""
    _, view = sample_view("towers_tf2")
    real = [n for n in view.nodes.values() if not n.virtual]
    assert list(view.real_nodes()) == real
    assert list(view.bodies) == list(dict.fromkeys(n.function for n in real))
    for wanted in ({"Conv2D"}, {"Conv2D", "VarHandleOp", "ReadVariableOp"}, {"NoSuchOp"}):
        assert view.of_ops(wanted.__contains__) == [n for n in real if n.op in wanted]


@pytest.mark.parametrize("name", ["linreg_tf2", "linreg_frozen.pb", "linreg_frozen.pbtxt", "towers_tf1.meta"])
def test_a_copy_is_the_whole_file_again_and_apart_from_the_model(sample_view, name):
    """emit rewrites model.copy() in place: it must equal the file's message and leave the loaded model alone."""
    model, _ = sample_view(name)
    whole = model.copy()
    loaded = model.saved_model if model.format == "saved_model" else model.meta_graph
    assert whole == loaded and whole is not loaded
    graph = whole.meta_graphs[model.index].graph_def if model.format == "saved_model" else whole.graph_def
    graph.node[0].name = "changed"
    assert model.graph_def.node[0].name != "changed"
