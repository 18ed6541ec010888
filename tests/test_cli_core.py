"""The inspect and partition commands end to end, and --verify on every sample model."""

import json

import pytest
from conftest import SAMPLES

pytestmark = pytest.mark.tf

SAMPLE_MODELS = [
    "linreg_tf1",
    "linreg_tf2",
    "towers_tf1",
    "towers_tf2",
    "stage_tf1",
    "stage_tf2",
    "deepfm_tf1",
    "deepfm_tf2",
    "linreg_frozen.pb",
    "linreg_frozen.pbtxt",
    "towers_tf1.meta",
]


def test_help_lists_commands_with_examples(msopt):
    result = msopt("--help")
    assert result.returncode == 0 and "inspect" in result.stdout and "partition" in result.stdout
    for command in ("inspect", "partition", "simulate", "visualize", "run"):
        text = msopt(command, "--help").stdout
        assert text.rindex("Example") > text.index("--help"), f"{command} --help must end with its example"
        assert text.rstrip().splitlines()[-1].strip().startswith(("msopt", "--"))


def test_inspect_json(msopt):
    result = msopt("inspect", SAMPLES / "deepfm_tf1", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    sig = info["signatures"]["serving_default"]
    assert len([k for k in sig["inputs"] if k.startswith("C")]) >= 20
    assert sig["inputs"]["C1"]["dtype"] == "int64" and sig["inputs"]["C1"]["shape"] == [None]
    assert info["format"] == "saved_model" and info["tag_sets"] == [["serve"]]
    assert info["op_types"]["MatMul"] >= 2


def test_inspect_reports_existing_streams(msopt):
    info = json.loads(msopt("inspect", SAMPLES / "linreg_tf1", "--json").stdout)
    assert info["stream_ids"] == {"0": 11, "1": 6}


@pytest.mark.parametrize("name", SAMPLE_MODELS)
def test_partition_verify_bitwise_on_every_sample(msopt, tmp_path, name):
    """Existing stream ids written as devices on 2 logical CPU devices compute bit for bit the same."""
    out = tmp_path / ("out" + (SAMPLES / name).suffix)
    report_file = tmp_path / "report.json"
    result = msopt(
        "partition",
        SAMPLES / name,
        "--streams",
        2,
        "--policy",
        "none",
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        out,
        "--report",
        report_file,
        "--verify",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == json.loads(report_file.read_text())
    for key in ("streams", "nodes_per_stream", "cross_stream_edges", "functions", "output", "elapsed_s"):
        assert key in report
    assert report["streams"] == 2 and len(report["nodes_per_stream"]) == 2
    assert report["verify"]["ok"] and report["verify"]["max_abs_diff"] == 0
    if name.startswith("linreg"):
        assert report["nodes_per_stream"][1] >= 4 and report["cross_stream_edges"] >= 1


def test_verify_detects_a_changed_model(sample, tmp_path):
    """--verify is not a rubber stamp: a rewrite that changes a constant is caught."""
    import numpy as np

    from msopt import emit
    from msopt.graph import protos
    from msopt.load import load
    from msopt.runner.verify import verify

    model = load(sample("linreg_frozen.pb"))
    out = emit.write(model, {}, tmp_path / "changed.pb")
    graph = protos.GraphDef.FromString(out.read_bytes())
    const = next(n for n in graph.node if n.op == "Const" and n.attr["dtype"].type == 1)
    tensor = const.attr["value"].tensor
    if tensor.tensor_content:
        tensor.tensor_content = (np.frombuffer(tensor.tensor_content, np.float32) + 1).tobytes()
    else:
        tensor.float_val[:] = [v + 1 for v in tensor.float_val]
    out.write_bytes(graph.SerializeToString())
    report = verify(model, load(out), devices=1)
    assert not report["ok"] and report["max_abs_diff"] > 0


def test_partition_default_output_and_force(msopt, sample):
    src = sample("linreg_tf1")
    first = msopt("partition", src, "--streams", 2, "--policy", "none")
    assert first.returncode == 0, first.stderr
    assert (src.parent / "linreg_tf1_ms2" / "saved_model.pb").exists()
    again = msopt("partition", src, "--streams", 2, "--policy", "none")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert msopt("partition", src, "--streams", 2, "--policy", "none", "--force").returncode == 0


@pytest.mark.slow
def test_many_function_keras_model_partition_verify(msopt, tmp_path, mobilenet_v2):
    result = msopt(
        "partition",
        mobilenet_v2,
        "--streams",
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
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["functions"]) > 100 and report["verify"]["ok"]


def test_unregistered_op_inspects_and_partitions_but_cannot_run(msopt, tmp_path):
    src = SAMPLES / "custom_op_tf1"
    assert msopt("inspect", src).returncode == 0
    ok = msopt("partition", src, "--streams", 2, "--policy", "none", "-o", tmp_path / "out")
    assert ok.returncode == 0, ok.stderr
    run = msopt("partition", src, "--streams", 2, "--policy", "none", "-o", tmp_path / "out2", "--verify")
    assert run.returncode == 2
    assert "not registered" in run.stderr and "Traceback" not in run.stderr


def test_verify_reports_a_rewritten_model_that_fails_to_run(sample, tmp_path):
    """A rewrite TensorFlow cannot execute is a failed check (exit 1 in the CLI), not an internal error."""
    from msopt import emit
    from msopt.graph import protos
    from msopt.load import load
    from msopt.runner.verify import verify

    model = load(sample("linreg_frozen.pb"))
    out = emit.write(model, {}, tmp_path / "broken.pb")
    graph = protos.GraphDef.FromString(out.read_bytes())
    matmul = next(n for n in graph.node if n.op == "MatMul")
    matmul.attr["transpose_a"].b = True  # [3,1] x [1,1] becomes [1,3] x [1,1]: a shape error at run time
    out.write_bytes(graph.SerializeToString())
    report = verify(model, load(out), devices=1)
    assert not report["ok"] and "fails" in report["error"]


def test_proto_only_commands_never_import_tensorflow(tmp_path):
    """inspect, partition, simulate and visualize work where TensorFlow is not installed."""
    import subprocess
    import sys

    model = SAMPLES / "deepfm_tf2"
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom msopt.cli import main\n"
        f"for args in (['inspect', {str(model)!r}], ['partition', {str(model)!r}, '-n', '2', '-o', {str(tmp_path / 'p')!r}],"
        f" ['simulate', {str(model)!r}, '-n', '2'], ['visualize', {str(model)!r}, '-o', {str(tmp_path / 'v.dot')!r}]):\n"
        "    result = CliRunner().invoke(main, args)\n"
        "    assert result.exit_code == 0, (args, result.output)\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
