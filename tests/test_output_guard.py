"""Every path msopt writes is checked against what it reads, before any work: nothing an input is, holds or sits in
is ever replaced, and --force replaces only what msopt wrote (msopt.files.output_guard)."""

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msopt import api
from msopt.cli import main
from msopt.errors import InputError
from msopt.files import output_guard

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"


def snapshot(root):
    """Every entry under ``root``: its kind and, for files, a digest of its bytes."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            seen[os.path.join(folder, name)] = "dir"
        for name in files:
            path = os.path.join(folder, name)
            seen[path] = "link" if os.path.islink(path) else hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return seen


def msopt(*args, cwd=None):
    """Run the msopt command line in this process: (exit code, stdout, stderr)."""
    runner = CliRunner()
    previous = os.getcwd()
    if cwd:
        os.chdir(cwd)
    try:
        result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    finally:
        os.chdir(previous)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A user's folder: a model two levels down, its side files, a frozen graph, and a link to the model's parent."""
    root = tmp_path_factory.mktemp("user")
    home = root / "projects" / "serving"
    home.mkdir(parents=True)
    shutil.copytree(SAMPLES / "linreg_tf1", home / "linreg")
    (home / "notes.txt").write_text("keep me\n")
    (home / "costs.json").write_text(json.dumps({"unit": "us", "ops": {}}))
    (home / "rules.yaml").write_text("rules:\n  - scope: weight\n    stream: 1\n")
    (root / "link").symlink_to(home, target_is_directory=True)
    return root


# (command line before the output option, the output option, the inputs it reads, the command line after it)
WRITERS = [
    (["partition", "{model}", "-n", "2"], "-o", ("model",), []),
    (["partition", "{model}", "-n", "2", "--rules", "{rules}", "-o", "{out}"], "--report", ("model", "rules"), []),
    (["partition", "{model}", "--lanes", "2"], "-o", ("model",), []),
    (["simulate", "{model}", "-n", "2", "--costs", "{costs}"], "--timeline", ("model", "costs"), []),
    (["visualize", "{model}", "--policy", "chains"], "-o", ("model",), []),
    (["visualize", "{model}", "--costs", "{costs}", "-o", "{out}.svg"], "--timeline", ("model", "costs"), []),
    (["run", "{model}", "--device", "cpu", "-k", "1", "-w", "0"], "--save-outputs", ("model",), []),
    (["run", "{model}", "--device", "cpu", "-k", "1", "-w", "0"], "--trace", ("model",), []),
    (["run", "{model}", "--device", "cpu", "-k", "1", "-w", "0"], "--profile", ("model",), []),
    (["tune", "{model}", "-n", "2"], "-o", ("model",), []),
    (["tune", "{model}", "-n", "2", "--rules", "{rules}", "-o", "{out}"], "--report", ("model", "rules"), []),
    (["tune", "{model}", "-n", "2", "-o", "{out}"], "--costs-output", ("model",), []),
]


def place(tree, which):
    home = tree / "projects" / "serving"
    return {"model": home / "linreg", "costs": home / "costs.json", "rules": home / "rules.yaml"}[which]


def spelled(tree, path, how):
    """``path`` as a user might type it: plainly, through ``..``, or through a symlink to the model's parent."""
    if how == "dots":
        return f"{path.parent}/../{path.parent.name}/{path.name}" if path != tree else str(path)
    if how == "link" and (tree / "projects" / "serving") in (path, *path.parents):
        return str(tree / "link" / path.relative_to(tree / "projects" / "serving"))
    return str(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writer=st.sampled_from(WRITERS),
    relation=st.sampled_from(["is", "inside", "parent", "grandparent", "root"]),
    how=st.sampled_from(["plain", "dots", "link"]),
    which=st.integers(0, 1),
    force=st.booleans(),
    data=st.data(),
)
def test_any_output_at_into_or_above_an_input_is_refused_before_any_work(
    tree, writer, relation, how, which, force, data
):
    before, line, reads, after = writer
    target = place(tree, reads[which % len(reads)])
    path = {
        "is": target,
        "inside": target / data.draw(st.sampled_from(["x.json", "variables", "sub/deeper.svg"])),
        "parent": target.parent,
        "grandparent": target.parent.parent,
        "root": Path("/"),
    }[relation]
    out = tree / "elsewhere" / "out"
    values = {k: place(tree, k) for k in ("model", "costs", "rules")} | {"out": out}
    args = [a.format(**values) for a in before] + [line, spelled(tree, path, how)] + after
    state = snapshot(tree)
    code, stdout, stderr = msopt(*args, *(["--force"] if force else []))
    assert code == 2, (args, stdout, stderr)
    assert stderr.startswith("msopt: error:") and stderr.count("\n") == 1, stderr
    assert "loading" not in stderr and "Traceback" not in stderr
    assert snapshot(tree) == state  # nothing written, nothing replaced, nothing deleted


def test_reproducers_the_input_and_everything_beside_it_stay(tree, tmp_path):
    model = tree / "projects" / "serving" / "linreg"
    state = snapshot(tree)
    cases = [
        ["partition", model, "-n", "2", "-o", model.parent, "--force"],  # deleted the folder holding the input
        ["partition", model, "-n", "2", "-o", model.parent.parent, "--force"],
        ["partition", model, "-n", "2", "-o", tmp_path / "o", "--report", model / "saved_model.pb"],
        ["simulate", model, "-n", "2", "--timeline", model / "saved_model.pb"],
        ["visualize", model, "-o", model / "x.svg"],
        ["tune", model, "-n", "2", "-o", model.parent, "--force"],
        ["tune", model, "-n", "2", "-o", tmp_path / "t", "--report", model / "saved_model.pb", "--force"],
        ["run", model, "--device", "cpu", "-k", "2", "-w", "0", "--save-outputs", model / "saved_model.pb"],
    ]
    for args in cases:
        code, _, stderr = msopt(*args)
        assert code == 2 and "input" in stderr, (args, stderr)
    assert snapshot(tree) == state
    assert not any(tmp_path.iterdir())


def test_a_frozen_graphs_folder_is_never_an_output(tmp_path):
    shutil.copy(SAMPLES / "linreg_frozen.pb", tmp_path / "frozen.pb")
    (tmp_path / "other.txt").write_text("keep")
    code, _, stderr = msopt("partition", tmp_path / "frozen.pb", "-n", "2", "-o", tmp_path, "--force")
    assert code == 2 and "folder holding the input" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frozen.pb", "other.txt"]


def test_two_outputs_at_one_path_or_nested_are_refused(tree, tmp_path):
    model = tree / "projects" / "serving" / "linreg"
    for report in (tmp_path / "o", tmp_path / "o" / "report.json"):
        code, _, stderr = msopt("partition", model, "-n", "2", "-o", tmp_path / "o", "--report", report)
        assert code == 2 and "two outputs at one path" in stderr
    code, _, stderr = msopt(
        "tune",
        model,
        "-n",
        "2",
        "-o",
        tmp_path / "t",
        "--report",
        tmp_path / "c.json",
        "--costs-output",
        tmp_path / "c.json",
    )
    assert code == 2 and "two outputs at one path" in stderr
    assert not any(tmp_path.iterdir())


def test_empty_paths_are_refused(tree):
    model = tree / "projects" / "serving" / "linreg"
    for args in (
        ["partition", model, "-n", "2", "-o", ""],
        ["partition", model, "-n", "2", "--report", ""],
        ["simulate", model, "-n", "2", "--timeline", ""],
        ["visualize", model, "-o", ""],
        ["tune", model, "-n", "2", "-o", ""],
    ):
        code, _, stderr = msopt(*args)
        assert code == 2 and "empty path" in stderr, (args, stderr)


def test_fifos_sockets_and_kernel_file_systems_are_refused(tree, tmp_path, monkeypatch):
    model = tree / "projects" / "serving" / "linreg"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        for special in (fifo, tmp_path / "sock"):
            for args in (
                ["partition", model, "-n", "2", "-o", tmp_path / "o", "--report", special, "--force"],
                ["partition", model, "-n", "2", "-o", special, "--force"],
                ["simulate", model, "-n", "2", "--timeline", special, "--force"],
            ):
                code, _, stderr = msopt(*args)
                assert code == 2 and "not a regular file or folder" in stderr, (args, stderr)
    finally:
        sock.close()
    # A stand-in for /dev and /proc: a folder of this test named as a kernel file system. The model is not written
    # even though the output would be a plain file there: the check comes before any work.
    fake = tmp_path / "fakeproc"
    fake.mkdir()
    monkeypatch.setattr(output_guard, "PSEUDO_ROOTS", (str(fake),))
    with pytest.raises(InputError, match="not a regular file or folder"):
        api.partition(model, 2, output=tmp_path / "o", report=fake / "self" / "mem")
    with pytest.raises(InputError, match="not a regular file or folder"):
        api.partition(model, 2, output=fake / "null", force=True)
    assert not (tmp_path / "o").exists() and not any(fake.iterdir())


def test_force_replaces_only_what_msopt_wrote(tree, tmp_path):
    model = tree / "projects" / "serving" / "linreg"
    out, report = tmp_path / "out", tmp_path / "report.json"
    assert msopt("partition", model, "-n", "2", "-o", out, "--report", report)[0] == 0
    assert json.loads((out / output_guard.MARKER).read_text())["entries"] == ["saved_model.pb", "variables"]
    code, _, stderr = msopt("partition", model, "-n", "2", "-o", out, "--report", report)
    assert code == 2 and "already exists (use --force" in stderr
    assert msopt("partition", model, "-n", "2", "-o", out, "--report", report, "--force")[0] == 0

    (out / "my_notes.txt").write_text("mine")  # a user's file in a model msopt wrote
    code, _, stderr = msopt("partition", model, "-n", "2", "-o", out, "--force")
    assert code == 2 and "'my_notes.txt' was added" in stderr and (out / "my_notes.txt").exists()

    users = tmp_path / "users"
    users.mkdir()
    (users / "data.csv").write_text("1,2\n")
    code, _, stderr = msopt("partition", model, "-n", "2", "-o", users, "--force")
    assert code == 2 and "a folder msopt did not write" in stderr and (users / "data.csv").exists()
    code, _, stderr = msopt(
        "partition", model, "-n", "2", "-o", tmp_path / "o2", "--report", users / "data.csv", "--force"
    )
    assert code == 2 and "not a JSON document" in stderr and not (tmp_path / "o2").exists()

    (users / "data.csv").unlink()  # an empty folder holds nothing to lose
    assert msopt("partition", model, "-n", "2", "-o", users, "--force")[0] == 0

    picture = tmp_path / "plan.svg"
    picture.write_text("not a picture")
    code, _, stderr = msopt("visualize", model, "-o", picture, "--force")
    assert code == 2 and "not an SVG picture" in stderr and picture.read_text() == "not a picture"


def test_a_model_written_from_a_model_msopt_wrote_carries_one_marker(tree, tmp_path):
    model = tree / "projects" / "serving" / "linreg"
    assert msopt("partition", model, "-n", "2", "-o", tmp_path / "a")[0] == 0
    assert msopt("partition", tmp_path / "a", "-n", "2", "-o", tmp_path / "b")[0] == 0
    marker = json.loads((tmp_path / "b" / output_guard.MARKER).read_text())
    assert marker["entries"] == sorted(p.name for p in (tmp_path / "b").iterdir() if p.name != output_guard.MARKER)


def test_a_marker_that_is_a_fifo_or_a_link_is_no_marker_and_is_not_waited_on(tree, tmp_path):
    model = tree / "projects" / "serving" / "linreg"
    for make in (os.mkfifo, lambda path: path.symlink_to("/dev/zero")):
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        make(out / output_guard.MARKER)
        code, _, stderr = msopt("partition", model, "-n", "2", "-o", out, "--force")
        assert code == 2 and "a folder msopt did not write" in stderr
