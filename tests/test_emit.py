"""Writing partitioned models: attributes, devices, copies, atomicity, and never touching the input."""

import hashlib

import pytest

from msopt import emit
from msopt.errors import InputError
from msopt.graph.view import STREAM_ATTR, GraphView
from msopt.load import load


def tree_digest(path):
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(path)).encode() + f.read_bytes())
    return digest.hexdigest()


def round_robin(view, streams):
    return {n.key: i % streams for i, n in enumerate(view.real_nodes())}


def test_stream_ids_and_devices_in_main_graph_and_functions(sample, tmp_path):
    src = sample("towers_tf2")
    before = tree_digest(src)
    model = load(src)
    view = GraphView(model.graph_def)
    plan = round_robin(view, 3)
    out = emit.write(model, plan, tmp_path / "out", placement="device", device_type="cpu")
    assert tree_digest(src) == before, "input changed"
    written = GraphView(load(out).graph_def)
    for node in written.real_nodes():
        assert node.stream == plan[node.key]
        assert node.device == f"/device:CPU:{plan[node.key]}"
    assert any(n.function for n in written.real_nodes())
    for var_file in (src / "variables").iterdir():
        assert (out / "variables" / var_file.name).read_bytes() == var_file.read_bytes()
    assert not (out / "fingerprint.pb").exists(), "a stale fingerprint must not be copied"


def test_attr_placement_keeps_devices_and_unassigned_nodes_lose_stale_ids(sample, tmp_path):
    model = load(sample("linreg_tf1"))
    view = GraphView(model.graph_def)
    keep = next(n for n in view.real_nodes() if n.stream == 1)
    out = emit.write(model, {keep.key: 1}, tmp_path / "out")
    written = GraphView(load(out).graph_def)
    assert written.nodes[keep.key].stream == 1
    assert sum(1 for n in written.real_nodes() if n.proto.attr.get(STREAM_ATTR) is not None) == 1
    assert all(n.device == view.nodes[n.key].device for n in written.real_nodes())


@pytest.mark.parametrize("name", ["linreg_frozen.pb", "linreg_frozen.pbtxt", "towers_tf1.meta"])
def test_graph_files_keep_their_format(sample, tmp_path, name):
    model = load(sample(name))
    out = emit.write(model, {n.key: 1 for n in GraphView(model.graph_def).real_nodes()}, tmp_path / f"o_{name}")
    again = load(out)
    assert (again.format, again.text) == (model.format, model.text)
    assert {n.stream for n in GraphView(again.graph_def).real_nodes()} == {1}


def test_default_output_name(tmp_path):
    (tmp_path / "m").mkdir()
    assert emit.default_output(tmp_path / "m", 4) == tmp_path / "m_ms4"
    assert emit.default_output(tmp_path / "g.pb", 2) == tmp_path / "g_ms2.pb"


def test_existing_output_needs_force_and_force_replaces(sample, tmp_path):
    model = load(sample("linreg_tf1"))
    out = tmp_path / "out"
    emit.write(model, {"X": 1}, out)
    with pytest.raises(InputError, match="already exists"):
        emit.write(model, {}, out)
    assert "_stream_id" in (out / "saved_model.pb").read_bytes().decode("latin-1")
    emit.write(model, {}, out, force=True)
    assert "_stream_id" not in (out / "saved_model.pb").read_bytes().decode("latin-1")


def test_force_keeps_a_folder_msopt_did_not_write(sample, tmp_path):
    model = load(sample("linreg_tf1"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("old")
    with pytest.raises(InputError, match="a folder msopt did not write"):
        emit.write(model, {}, out, force=True)
    assert (out / "old").read_text() == "old"
    (out / "old").unlink()  # an empty folder holds nothing to lose
    emit.write(model, {}, out, force=True)
    assert (out / "saved_model.pb").exists()


def test_output_inside_or_equal_to_input_is_refused(sample):
    src = sample("linreg_tf1")
    model = load(src)
    for bad in (src, src / "sub"):
        with pytest.raises(InputError, match="overwrite the input|inside the input"):
            emit.write(model, {}, bad, force=True)


def test_failure_midway_leaves_no_output_and_no_temporary(sample, tmp_path, monkeypatch):
    model = load(sample("linreg_tf1"))

    def broken(model, saved, tmp):
        (tmp / "variables").mkdir()
        raise OSError("disk full")

    monkeypatch.setattr(emit, "_write_saved_model", broken)
    with pytest.raises(OSError):
        emit.write(model, {}, tmp_path / "out")
    assert list(tmp_path.iterdir()) == [tmp_path / "linreg_tf1"]


def test_several_meta_graphs_select_by_tags_and_keep_the_others(sample, tmp_path):
    from msopt.graph import protos

    src = sample("linreg_tf1")
    pb = src / "saved_model.pb"
    saved = protos.SavedModel.FromString(pb.read_bytes())
    extra = saved.meta_graphs.add()
    extra.CopyFrom(saved.meta_graphs[0])
    extra.meta_info_def.tags[:] = ["serve", "gpu"]
    pb.write_bytes(saved.SerializeToString())
    with pytest.raises(InputError):
        load(src, "train")
    model = load(src, "gpu,serve")
    assert model.index == 1 and model.tag_sets == [("serve",), ("serve", "gpu")]
    view = GraphView(model.graph_def)
    out = emit.write(model, {n.key: 1 for n in view.real_nodes()}, tmp_path / "out")
    written = protos.SavedModel.FromString((out / "saved_model.pb").read_bytes())
    assert written.meta_graphs[0] == saved.meta_graphs[0], "the MetaGraph not selected is untouched"
    assert all(n.attr["_stream_id"].i == 1 for n in written.meta_graphs[1].graph_def.node)


@pytest.mark.parametrize("name", ["stage_tf2", "deepfm_tf1", "bilinear_tf1", "towers_tf2", "linreg_frozen.pb"])
@pytest.mark.parametrize("placement", ["attr", "device"])
def test_the_views_consumers_rewrite_the_same_model_as_reading_every_node(name, placement):
    """With the model's view, emit finds the nodes to rewrite (stream ids, Const copies' consumers) from the view's
    bodies and edges instead of reading every NodeDef: the written model is the same, byte for byte."""
    import random

    from msopt.planning.const_copies import const_copies
    from tests.conftest import SAMPLES

    model = load(SAMPLES / name)
    view = GraphView(model.graph_def)
    rng = random.Random(name)
    written = 0
    for trial in range(6):
        keys = [n.key for n in view.real_nodes()]
        plan = {k: rng.randrange(3) for k in keys if rng.random() < (0.6, 1.0)[trial % 2]}
        _, copies = const_copies(view, plan)
        written += bool(copies)
        outs = []
        for with_view in (None, view):
            whole = model.copy()
            meta = whole.meta_graphs[model.index] if model.format == "saved_model" else whole  # as emit.write has it
            emit.rewrite_meta_graph(meta, plan, placement, "gpu", copies, with_view)
            outs.append(meta.SerializeToString(deterministic=True))
        assert outs[0] == outs[1]
    assert written >= 3  # most plans copy constants
