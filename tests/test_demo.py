"""The quick-start demo shows the product working: its partition uses several streams, the simulator's own
figures show a gain at the demo's target and batch size, the rewrite verifies bitwise, the picture is drawn."""

import json
import re
import shlex

import pytest
from conftest import ROOT, run_msopt

pytestmark = pytest.mark.tf

DEMO = ROOT / "scripts" / "demo.sh"


def demo_command(name):
    """The arguments of the demo's ``msopt NAME`` command, its shell variables filled in."""
    text = DEMO.read_text().replace("\\\n", " ")
    variables = dict(re.findall(r"^(\w+)=(\S+)", text, re.M))
    line = next(line for line in text.splitlines() if line.startswith(f"msopt {name} "))
    args = shlex.split(line.split("#")[0])[2:]
    return [re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), a) for a in args]


def option(args, name):
    return args[args.index(name) + 1]


def test_the_demo_partition_pays_by_the_simulators_figures_and_verifies(tmp_path):
    args = demo_command("partition")
    model = args[0]
    assert (ROOT / model).is_dir(), model
    keep = [
        a for i, a in enumerate(args[1:], 1) if a not in ("-o", "--report") and args[i - 1] not in ("-o", "--report")
    ]
    done = run_msopt("partition", model, *keep, "-o", tmp_path / "out", "--json", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    sim = doc["simulated"]
    assert sim["target"] == option(args, "--target") and sim["batch_size"] == int(option(args, "--batch-size"))
    assert sum(1 for n in doc["nodes_per_stream"] if n) > 1, doc["nodes_per_stream"]
    assert sim["makespan_ms"] < sim["single_stream_ms"] and sim["speedup"] > 1.5, sim
    assert doc["verify"]["ok"] and doc["verify"]["max_abs_diff"] == 0, doc["verify"]
    draw = demo_command("visualize")
    assert option(draw, "--target") == sim["target"] and int(option(draw, "--batch-size")) == sim["batch_size"]
    picture = tmp_path / "plan.svg"
    keep = [a for i, a in enumerate(draw[1:], 1) if a != "-o" and draw[i - 1] != "-o"]
    drawn = run_msopt("visualize", tmp_path / "out", *keep, "-o", picture, cwd=ROOT)
    assert drawn.returncode == 0, drawn.stderr
    assert (
        picture.read_text().lstrip().startswith(("<?xml", "<svg")) and f"{sim['speedup']:.3g}x" in picture.read_text()
    )
