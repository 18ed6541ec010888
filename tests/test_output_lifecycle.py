"""Outputs appear whole or not at all: verification in a private directory, nothing unverified at -o,
--force swapping the output in one step (kills at any moment, concurrent writers), stale leftovers removed."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLES, run_msopt

from msopt.errors import InputError
from msopt.files import outputs
from msopt.files.output_guard import MARKER
from msopt.graph import protos
from msopt.load import load

pytestmark = pytest.mark.tf

NOISE_NODES = """
node { name: "noise_shape" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
  attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 1 } } int_val: 4 } } } }
node { name: "noise" op: "RandomUniform" input: "noise_shape" attr { key: "T" value { type: DT_INT32 } }
  attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "seed" value { i: 0 } } attr { key: "seed2" value { i: 0 } } }
"""


def unsigned_linreg(tmp_path):
    """linreg_tf1 without signatures: running its bare graph runs the Saver's save op (writes ./model.*)."""
    import shutil

    model = tmp_path / "linreg_nosig"
    shutil.copytree(SAMPLES / "linreg_tf1", model)
    saved = protos.SavedModel.FromString((model / "saved_model.pb").read_bytes())
    saved.meta_graphs[0].ClearField("signature_def")
    (model / "saved_model.pb").write_bytes(saved.SerializeToString())
    return model


def noisy_graph(tmp_path):
    """linreg_frozen plus an unseeded RandomUniform output: every run differs, so any rewrite fails --verify."""
    model = tmp_path / "noisy.pbtxt"
    model.write_text((SAMPLES / "linreg_frozen.pbtxt").read_text() + NOISE_NODES)
    return model


def stage_with_a_frame_error(tmp_path):
    """stage_tf1 with one loop Enter moved to another frame: grappler logs an E-line when it runs."""
    import shutil

    model = tmp_path / "stage_frame"
    shutil.copytree(SAMPLES / "stage_tf1", model)
    saved = protos.SavedModel.FromString((model / "saved_model.pb").read_bytes())
    for node in saved.meta_graphs[0].graph_def.node:
        if node.name == "model/while/add/ReadVariableOp/Enter":
            node.attr["frame_name"].s = b"other_frame"
    (model / "saved_model.pb").write_bytes(saved.SerializeToString())
    return model


def private_tmp(tmp_path):
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp)}, tmp


def siblings(out):
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


# -- verification: a private working directory, no output unless verified ------------------------
def test_verify_writes_nothing_into_the_working_directory(tmp_path):
    model = unsigned_linreg(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env, tmp = private_tmp(tmp_path)
    result = run_msopt(
        "partition",
        model,
        "-n",
        2,
        "--policy",
        "none",
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        tmp_path / "out",
        "--verify",
        cwd=cwd,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "verify: outputs identical" in result.stdout
    assert list(cwd.iterdir()) == [], "the graph's save op wrote into the working directory"
    assert list(tmp.iterdir()) == [], "the private working directory was left behind"


def test_run_writes_nothing_into_the_working_directory(tmp_path):
    model = unsigned_linreg(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env, tmp = private_tmp(tmp_path)
    result = run_msopt(
        "run", model, "--device", "cpu", "--iterations", 3, "--warmup", 0, "--trace", "trace.json", cwd=cwd, env=env
    )
    assert result.returncode == 0, result.stderr
    assert [p.name for p in cwd.iterdir()] == ["trace.json"], "only what the user asked for lands there"
    assert list(tmp.iterdir()) == []


def test_failed_verify_leaves_no_model_at_the_output(tmp_path):
    model = noisy_graph(tmp_path)
    out = tmp_path / "out.pbtxt"
    report = tmp_path / "report.json"
    result = run_msopt("partition", model, "-n", 2, "--policy", "none", "-o", out, "--verify", "--report", report)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msopt: error: ") and f"nothing written to {out}" in lines[0], lines
    assert "verify failed: wrote nothing" in result.stdout
    assert not out.exists() and siblings(out) == []
    document = json.loads(report.read_text())
    assert document["output"] is None and document["verify"]["ok"] is False


def test_failed_verify_keeps_the_output_already_there(tmp_path):
    model = noisy_graph(tmp_path)
    out = tmp_path / "out.pbtxt"
    yesterday = (SAMPLES / "linreg_frozen.pbtxt").read_text() + "# the verified model of yesterday\n"
    out.write_text(yesterday)  # --force replaces only a model: what msopt wrote there
    result = run_msopt("partition", model, "-n", 2, "--policy", "none", "-o", out, "--force", "--verify", "--json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["output"] is None
    assert out.read_text() == yesterday and siblings(out) == []


def test_verify_keeps_tensorflow_log_lines_off_stderr(tmp_path):
    model = stage_with_a_frame_error(tmp_path)
    out = tmp_path / "out"
    result = run_msopt(
        "partition",
        model,
        "-n",
        2,
        "--policy",
        "chains",
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        out,
        "--verify",
    )
    assert result.returncode in (1, 2)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msopt: error: "), result.stderr
    assert "E0000" not in result.stderr and "meta_optimizer" not in result.stderr
    assert not out.exists() and siblings(out) == []


# -- the replacement itself ------------------------------------------------------------------------
def built(out, content):
    """Build ``out`` (a directory holding one file) the way emit does, and put it in place with force."""
    with outputs.staged(out) as path:
        path.mkdir()
        (path / "payload").write_text(content)
        outputs.put(path, out, force=True)


def test_a_report_where_it_cannot_be_written_is_bad_input(tmp_path):
    result = run_msopt(
        "partition",
        SAMPLES / "linreg_frozen.pb",
        "-n",
        2,
        "--policy",
        "none",
        "-o",
        tmp_path / "out.pb",
        "--report",
        tmp_path / "missing" / "report.json",
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "missing/report.json: parent directory does not exist" in result.stderr
    assert not (tmp_path / "out.pb").exists(), "the model was written although the command failed"


def test_put_refuses_an_existing_output_without_force(tmp_path):
    out = tmp_path / "out"
    built(out, "first")
    with outputs.staged(out) as path:
        path.mkdir()
        with pytest.raises(InputError, match="already exists"):
            outputs.put(path, out, force=False)
    assert (out / "payload").read_text() == "first" and siblings(out) == []


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "fallback"])
def test_force_replaces_directories_files_and_symlinks(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(outputs, "_renameat2_function", None)
    elif outputs._renameat2_function is None:
        pytest.skip("no renameat2 on this system")
    out = tmp_path / "out"
    built(out, "first")
    built(out, "second")
    assert (out / "payload").read_text() == "second"
    out_file = tmp_path / "report.json"
    outputs.write_bytes(out_file, b"1")
    outputs.write_bytes(out_file, b"2")
    assert out_file.read_bytes() == b"2"
    built(out_file, "a directory over a file")
    assert (out_file / "payload").exists()
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    built(link, "over the link")
    assert (link / "payload").exists() and not link.is_symlink() and list(target.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_boxes_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    out = tmp_path / "out"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.msopt-{dead.pid}-abc.tmp"
    (stale / "out").mkdir(parents=True)
    live = tmp_path / f".out.msopt-{os.getppid()}-def.tmp"
    live.mkdir()
    built(out, "new")
    assert not stale.exists() and live.exists()


def test_concurrent_force_writers_all_succeed_and_the_last_wins(tmp_path):
    src = SAMPLES / "linreg_tf1"
    out = tmp_path / "out"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    for _ in range(3):
        writers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "msopt",
                    "partition",
                    str(src),
                    "-n",
                    "2",
                    "--policy",
                    "none",
                    "-o",
                    str(out),
                    "--force",
                    "--report",
                    str(tmp_path / "report.json"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(6)
        ]
        for writer in writers:
            _, err = writer.communicate(timeout=300)
            assert writer.returncode == 0, err
        assert_complete(out, src)
        assert json.loads((tmp_path / "report.json").read_text())["output"] == str(out)
        assert siblings(out) == [] and siblings(tmp_path / "report.json") == []


def test_concurrent_force_writes_in_threads_never_fail(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from msopt import emit
    from msopt.graph.view import GraphView

    model = load(SAMPLES / "towers_tf1")
    plan = {n.key: i % 2 for i, n in enumerate(GraphView(model.graph_def).real_nodes())}
    out = tmp_path / "out"

    def writes(_):
        for _ in range(15):
            emit.write(model, plan, out, force=True)
            assert (out / "saved_model.pb").exists()

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(writes, range(6)))
    assert_complete(out, SAMPLES / "towers_tf1")
    assert siblings(out) == []


def assert_complete(out, src):
    names = {p.relative_to(src) for p in src.rglob("*")} - {Path("fingerprint.pb")} | {Path(MARKER)}
    assert {p.relative_to(out) for p in out.rglob("*")} == names
    load(out)


def test_sigkill_at_any_moment_leaves_a_complete_output_and_no_leftovers(tmp_path):
    src = SAMPLES / "deepfm_tf2"
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "msopt",
        "partition",
        str(src),
        "-n",
        "2",
        "--policy",
        "none",
        "-o",
        str(out),
        "--force",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run(command, check=True, capture_output=True, env=env)
    rng = random.Random(9)
    killed_while_writing = 0
    for _ in range(12):
        before = set(siblings(out))
        writer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        while not set(siblings(out)) - before and writer.poll() is None:  # aim at the write itself, not the start-up
            time.sleep(0.001)
        time.sleep(rng.uniform(0, 0.04))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        killed_while_writing += writer.returncode == -signal.SIGKILL
        assert_complete(out, src)
    subprocess.run(command, check=True, capture_output=True, env=env)
    assert_complete(out, src)
    assert siblings(out) == [], "boxes of killed runs were not cleaned by the next run"
    assert killed_while_writing > 0
