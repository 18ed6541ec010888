"""The Python API: msopt.inspect/partition/simulate return the commands' JSON documents and raise typed errors."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES

import msopt as ms

VOLATILE = ("elapsed_s", "output", "model", "path", "timeline")


def same(api_doc, cli_doc):
    strip = lambda d: {k: v for k, v in json.loads(json.dumps(d, default=str)).items() if k not in VOLATILE}  # noqa: E731
    assert strip(api_doc) == strip(cli_doc)


def test_inspect_is_the_inspect_document(msopt):
    cli = json.loads(msopt("inspect", SAMPLES / "deepfm_tf2", "--json").stdout)
    same(ms.inspect(SAMPLES / "deepfm_tf2"), cli)


def test_partition_is_the_partition_document_and_writes_the_model(msopt, tmp_path):
    api_doc = ms.partition(SAMPLES / "towers_tf1", streams=2, policy="towers", output=tmp_path / "api")
    cli_doc = json.loads(
        msopt(
            "partition", SAMPLES / "towers_tf1", "-n", 2, "--policy", "towers", "-o", tmp_path / "cli", "--json"
        ).stdout
    )
    same(api_doc, cli_doc)
    assert api_doc["output"] == str(tmp_path / "api") and (tmp_path / "api" / "saved_model.pb").is_file()
    assert api_doc["nodes_per_stream"][1] > 0 and "simulated" in api_doc


def test_simulate_is_the_simulate_document_and_boundary_works_as_for_partition(msopt, tmp_path):
    boundary = ["preprocess/stack:0"]
    api_doc = ms.simulate(SAMPLES / "stage_tf1", streams=3, policy="stage", boundary=boundary, target="v100")
    cli_doc = json.loads(
        msopt(
            "simulate",
            SAMPLES / "stage_tf1",
            "-n",
            3,
            "--policy",
            "stage",
            "--boundary",
            boundary[0],
            "--target",
            "v100",
            "--json",
        ).stdout
    )
    same(api_doc, cli_doc)
    # The same plan as partition --boundary: simulating the partitioned model as it is gives the same figures.
    ms.partition(
        SAMPLES / "stage_tf1", streams=3, policy="stage", boundary=boundary, const_dup=False, output=tmp_path / "staged"
    )
    kept = ms.simulate(tmp_path / "staged", streams=3, policy="none", target="v100")
    assert kept["makespan_ms"] == api_doc["makespan_ms"] and kept["stream_busy_ms"] == api_doc["stream_busy_ms"]
    found = ms.simulate(SAMPLES / "stage_tf1", streams=3, policy="stage", target="v100")
    assert found["stream_busy_ms"] != api_doc["stream_busy_ms"]  # the boundary is not ignored


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda out: ms.partition(SAMPLES / "linreg_tf1", policy="nope", output=out), "unknown policy 'nope'"),
        (lambda out: ms.partition(SAMPLES / "no_such_model", output=out), "no_such_model"),
        (lambda out: ms.simulate(SAMPLES / "linreg_tf1", batch_size=0), "--batch-size"),
        (lambda out: ms.partition(SAMPLES / "linreg_tf1", policy="towers", rules="r.yaml", output=out), "--rules"),
    ],
)
def test_bad_input_raises_input_error_and_writes_nothing(tmp_path, call, message):
    with pytest.raises(ms.InputError, match=re.escape(message)):
        call(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_refused_then_replaced_with_force(tmp_path):
    out = tmp_path / "out"
    ms.partition(SAMPLES / "linreg_tf1", streams=2, output=out)
    with pytest.raises(ms.InputError, match="already exists"):
        ms.partition(SAMPLES / "linreg_tf1", streams=2, output=out)
    assert ms.partition(SAMPLES / "linreg_tf1", streams=2, output=out, force=True)["output"] == str(out)


def test_the_api_functions_survive_importing_the_modules_of_the_same_names():
    import msopt.planning.partition  # noqa: F401  (the partition summary module)
    import msopt.simulator.simulate  # noqa: F401  (the simulator)
    from msopt.simulator.simulate import simulate as simulator

    assert ms.simulate is not simulator and callable(ms.simulate) and callable(ms.partition)
    assert issubclass(ms.VerifyFailed, ms.CheckFailed)


def test_import_msopt_and_partition_without_verify_import_no_tensorflow(tmp_path):
    code = (
        "import sys, msopt\n"
        f"doc = msopt.partition({str(SAMPLES / 'linreg_tf1')!r}, streams=2, output={str(tmp_path / 'o')!r})\n"
        f"msopt.simulate({str(SAMPLES / 'linreg_tf1')!r})\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\nprint(doc['streams'])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "2", result.stderr


def test_the_example_of_docs_api_runs_as_written(tmp_path):
    code = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S).group(1)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the example's temporary directory, watched
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    assert "refused: unknown policy 'no-such-policy'" in result.stdout
    assert not list(tmp_path.iterdir())  # it leaves nothing behind


def test_partition_with_rules_reports_unmatched_rules_through_warn(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - scope: weight_y\n    stream: 1\n  - op: NoSuchOp\n    stream: 1\n")
    warnings = []
    doc = ms.partition(SAMPLES / "linreg_tf1", streams=2, rules=rules, output=tmp_path / "out", warn=warnings.append)
    assert doc["policy"] == "manual" and [r["rule"] for r in doc["unmatched_rules"]] == [2]
    assert warnings == [f"rule 2 ({rules}:4) matched no node"]
