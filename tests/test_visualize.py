"""msopt visualize: folded scope pictures rendered with the real dot, and the HTML report checked in headless Chromium."""

import json
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import SAMPLES, run_msopt

from msopt import visualize as draw
from msopt.graph.view import GraphView
from msopt.load import load

pytestmark = pytest.mark.tf

SVG = "{http://www.w3.org/2000/svg}"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz 'dot' is not installed")
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


def svg_texts(path):
    """Every text of an SVG (parsing it as XML on the way: a malformed file fails here)."""
    root = ET.parse(path).getroot()
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def svg_classes(path):
    return [g.get("class", "") for g in ET.parse(path).getroot().iter(f"{SVG}g")]


def ops_of(name):
    model = load(SAMPLES / name)
    view = GraphView(model.graph_def)
    return model, view, *draw.signature_ops(model, view)


# -- the ops of a signature ----------------------------------------------------------------------
def test_tf2_signature_opens_function_calls_and_leaves_out_bookkeeping():
    _, view, ops, edges, sig = ops_of("towers_tf2")
    assert sig == "serving_default"
    kinds = {op.op for op in ops}
    assert {"Conv2D", "MatMul", "Placeholder"} <= kinds
    assert not kinds & {"VarHandleOp", "SaveV2", "RestoreV2", "StatefulPartitionedCall"}
    tops = {op.path[0] for op in ops}
    assert {"tower_0", "tower_1"} <= tops  # the body's scopes, opened under the call's (top) scope
    # each Placeholder of the main graph reaches a Conv2D inside the function body through the call's argument
    succ = {}
    for s, d, _ in edges:
        succ.setdefault(s, []).append(d)
    for start in (i for i, op in enumerate(ops) if op.op == "Placeholder"):
        seen, stack = {start}, [start]
        while stack:
            for d in succ.get(stack.pop(), []):
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        assert any(ops[i].op == "Conv2D" for i in seen), ops[start].path


def test_tf1_and_tf2_towers_fold_into_the_same_top_scopes():
    *_, ops1, _, _ = ops_of("towers_tf1")
    *_, ops2, _, _ = ops_of("towers_tf2")
    for ops in (ops1, ops2):
        root, _ = draw.fold(ops, [], {}, depth=1)
        assert {"tower_0", "tower_1"} <= set(root.children)
        assert not root.children["tower_0"].open


def test_a_model_without_signatures_shows_its_whole_graph():
    model, view, ops, _, sig = ops_of("linreg_frozen.pb")
    assert sig is None
    assert len(ops) == sum(1 for _ in view.real_nodes())


def test_op_streams_follow_the_partition_then_the_caller():
    _, view, ops, _, _ = ops_of("towers_tf2")
    call = next(op.callers[0] for op in ops if op.callers)
    streams = draw.op_streams(ops, {call: 1})
    assert all(s == 1 for op, s in zip(ops, streams) if op.callers)
    assert all(s == 0 for op, s in zip(ops, streams) if not op.callers)


def test_crowded_scope_is_cut_into_stages_along_the_data_flow():
    # a chain of 100 one-op scopes: too many to draw side by side, so they become runs of neighbours
    ops = [draw.Op(f"n{i}", ("net", f"layer_{i}", "op"), "Relu", ()) for i in range(100)]
    edges = [(i, i + 1, False) for i in range(99)]
    root, _ = draw.fold(ops, edges, {}, depth=1)
    net = root.children["net"]
    assert net.open  # holds every op: opened without spending a level
    stages = list(net.children.values())
    assert all(s.stage for s in stages) and len(stages) <= draw.MAX_MEMBERS
    covered = [int(name.split("_")[1]) for s in stages for name in s.children]
    assert covered == list(range(100))  # in data-flow order, each layer once


def test_expand_names_an_existing_scope():
    *_, ops, edges, _ = ops_of("deepfm_tf1")
    root, _ = draw.fold(ops, edges, {}, depth=1, expand=["input_layer"])
    assert root.children["input_layer"].open
    with pytest.raises(Exception, match="no scope 'nowhere'"):
        draw.fold(ops, edges, {}, expand=["nowhere"])


# -- pictures with the real dot ------------------------------------------------------------------
SAMPLE_RUNS = [
    ("linreg_tf1", []),
    ("linreg_tf2", []),
    ("linreg_frozen.pb", []),
    ("towers_tf1.meta", []),
    ("towers_tf1", ["--policy", "towers", "--streams", "2"]),
    ("towers_tf2", ["--policy", "towers", "--streams", "2"]),
    ("stage_tf1", ["--policy", "stage", "--streams", "2"]),
    ("stage_tf2", ["--policy", "stage", "--streams", "2"]),
    ("deepfm_tf1", ["--policy", "embedding", "--streams", "4"]),
    ("deepfm_tf2", ["--policy", "embedding", "--streams", "4"]),
    ("custom_op_tf1", []),
]


@needs_dot
@pytest.mark.parametrize("name,args", SAMPLE_RUNS, ids=[n for n, _ in SAMPLE_RUNS])
def test_sample_model_renders_an_svg_naming_every_stream(tmp_path, name, args):
    out = tmp_path / "picture.svg"
    result = run_msopt("visualize", SAMPLES / name, "-o", out, "--json", *args)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    texts = " ".join(svg_texts(out))
    for k in range(doc["streams"]):
        assert f"stream {k}" in texts
    assert sum(row["ops"] for row in doc["legend"]) == doc["ops_shown"] > 0
    classes = svg_classes(out)
    drawn = sum(1 for c in classes if c.startswith("node"))
    assert drawn <= 60  # folded: a readable number of boxes
    if doc["cross_stream_edges"]:
        assert any(c == "edge cross" for c in classes)


@needs_dot
def test_existing_stream_ids_are_drawn_and_cross_edges_stand_out(tmp_path):
    out = tmp_path / "linreg.svg"
    result = run_msopt("visualize", SAMPLES / "linreg_tf1", "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["policy"] == "none" and doc["streams"] == 2  # taken from the model's _stream_id attributes
    assert all(row["ops"] > 0 for row in doc["legend"])
    classes = svg_classes(out)
    assert "node stream1" in classes and "edge cross" in classes


@needs_dot
def test_a_scope_over_several_streams_shows_its_shares(tmp_path):
    out = tmp_path / "deepfm.svg"
    result = run_msopt("visualize", SAMPLES / "deepfm_tf1", "--policy", "embedding", "--streams", "4", "-o", out)
    assert result.returncode == 0, result.stderr
    texts = svg_texts(out)
    shares = [t for t in texts if re.search(r"\d+ ops · s\d+ \d+%\s+s\d+ \d+%", t)]
    assert shares, texts
    mixed = [g for g in ET.parse(out).getroot().iter(f"{SVG}g") if len(g.get("class", "").split()) > 2]
    assert mixed  # a box carrying several stream classes


@needs_dot
@pytest.mark.slow
def test_nasnet_folds_into_a_readable_picture(tmp_path, nasnet_mobile):
    out = tmp_path / "nasnet.svg"
    result = run_msopt("visualize", nasnet_mobile, "--policy", "chains", "--streams", "4", "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ops_shown"] > 2000
    texts = " ".join(svg_texts(out))
    for k in range(4):
        assert f"stream {k}" in texts
    classes = svg_classes(out)
    assert sum(1 for c in classes if c.startswith("node")) <= 60
    assert "edge cross" in classes
    wider = tmp_path / "nasnet_open.svg"
    result = run_msopt("visualize", nasnet_mobile, "--policy", "chains", "--streams", "4", "--depth", "2", "-o", wider)
    assert result.returncode == 0, result.stderr
    assert sum(1 for c in svg_classes(wider) if c.startswith("node")) > 100


@needs_dot
@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".dot", b"digraph")])
def test_other_formats(tmp_path, suffix, magic):
    out = tmp_path / f"towers{suffix}"
    result = run_msopt("visualize", SAMPLES / "towers_tf1", "--policy", "towers", "--streams", "2", "-o", out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(magic)


def test_without_dot_writes_the_dot_file_and_says_how_to_render(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = tmp_path / "linreg.svg"
    result = run_msopt("visualize", SAMPLES / "linreg_tf1", "-o", out, env={"PATH": str(empty)})
    assert result.returncode == 0, result.stderr
    assert not out.exists()
    assert (tmp_path / "linreg.dot").read_text().startswith("digraph")
    assert "dot -Tsvg" in result.stderr and "graphviz" in result.stderr
    report = tmp_path / "report.html"
    result = run_msopt("visualize", SAMPLES / "linreg_tf1", "-o", report, env={"PATH": str(empty)})
    assert result.returncode == 0, result.stderr
    assert "graphviz <code>dot</code> was not found" in report.read_text() and (tmp_path / "report.dot").exists()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in (
        ["-o", tmp_path / "x.jpg"],
        ["--expand", "nowhere", "-o", tmp_path / "x.dot"],
        ["--signature", "nope", "-o", tmp_path / "x.dot"],
        ["--policy", "towers", "--rules", __file__],
    ):
        result = run_msopt("visualize", SAMPLES / "deepfm_tf1", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("msopt: error: ") and len(result.stderr.strip().splitlines()) == 1


def test_timeline_is_a_chrome_trace_with_a_track_per_stream(tmp_path):
    trace = tmp_path / "trace.json"
    result = run_msopt(
        "visualize",
        SAMPLES / "towers_tf2",
        "--policy",
        "towers",
        "--streams",
        "2",
        "-o",
        tmp_path / "t.dot",
        "--timeline",
        trace,
    )
    assert result.returncode == 0, result.stderr
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"stream 0", "stream 1"} <= tracks
    assert any(e.get("ph") == "X" and e["tid"] == 1 for e in events)


# -- the HTML report in a real browser ------------------------------------------------------------
def chromium_dom(html_path, fragment=""):
    """(DOM after load, console lines) from headless Chromium with a fresh profile."""
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                "--dump-dom",
                Path(html_path).as_uri() + fragment,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.stdout, console


@needs_chromium
def test_console_errors_are_seen(tmp_path):
    """The browser check itself can fail: a page with a script error shows up in the console lines."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body></html>")
    _, console = chromium_dom(page)
    assert any("undefinedFunction" in line for line in console)


@needs_dot
@needs_chromium
@pytest.mark.parametrize(
    "name,args",
    [
        ("towers_tf2", ["--policy", "towers", "--streams", "2"]),
        ("deepfm_tf1", ["--policy", "embedding", "--streams", "4"]),
    ],
)
def test_html_report_loads_in_chromium_without_console_errors(tmp_path, name, args):
    report = tmp_path / "report.html"
    result = run_msopt("visualize", SAMPLES / name, "-o", report, "--json", *args)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    text = report.read_text()
    assert not re.search(r'(?:src|href)="(?!#|data:)', text)  # self-contained: nothing to fetch
    dom, console = chromium_dom(report)
    assert console == []
    assert 'data-ready="yes"' in dom  # the page's script ran to its end
    legend = re.search(r'<table id="legend">(.*?)</table>', dom, re.S).group(1)
    for k in range(doc["streams"]):
        assert f'data-stream="{k}"' in legend and f"stream {k}<" in legend
    assert dom.count("<svg") >= 2  # the graph picture and the Gantt chart
    assert 'class="gantt"' in dom and "speedup" in dom
    # the script's highlighting, driven by a link to one stream: its row picked, other streams' boxes dimmed
    dom, console = chromium_dom(report, "#stream=1")
    assert console == []
    assert re.search(r'<tr data-stream="1" class="picked">', dom)
    nodes = re.findall(r'<g id="node\d+" class="([^"]*)"', dom)
    assert any("stream1" in c and "dim" not in c for c in nodes)
    assert any("stream1" not in c.split() and "dim" in c.split() for c in nodes)


@needs_dot
def test_rules_file_partitions_on_the_fly(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text('rules:\n  - scope: "tower_1/"\n    stream: 1\n')
    out = tmp_path / "towers.svg"
    result = run_msopt("visualize", SAMPLES / "towers_tf1", "--rules", rules, "--streams", "2", "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["policy"] == "manual"
    boxes = {}
    for g in ET.parse(out).getroot().iter(f"{SVG}g"):
        texts = [t.text for t in g.iter(f"{SVG}text")]
        if texts and g.get("class", "").startswith("node"):
            boxes[texts[0]] = g.get("class")
    assert boxes["tower_1"] == "node stream1"
    assert boxes["tower_0"].startswith(
        "node stream0"
    )  # the constraints may pull a few ops to the shared weights' stream


def test_help_ends_with_examples_that_run(tmp_path):
    result = run_msopt("visualize", "--help")
    assert result.returncode == 0
    tail = result.stdout.rstrip().splitlines()[-4:]
    assert any(line.strip().startswith("msopt visualize sample_models/") for line in tail)
    example = ["visualize", SAMPLES / "linreg_tf1", "-o", tmp_path / "linreg.dot"]
    assert run_msopt(*example).returncode == 0
