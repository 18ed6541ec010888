"""Policy manual: the rules file (selectors, order, defaults, existing ids, errors) and partition --rules end to end."""

import json

import pytest
from conftest import SAMPLES
from test_constraints import mismatches, run_probe

from msopt.errors import InputError
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.planning.plan import ManualOptions, PlanOptions, make_plan
from msopt.rules import RuleOptions
from msopt.rules.manual import manual, read_rules

pytestmark = pytest.mark.tf

DEEPFM_TF2_RULES = """\
rules:
  - match: "deepfm_1/C1[0-9]_embedding_1/.*"   # regex, full match on the node name
    function: ".*__call__.*"                  # and the enclosing function's name
    stream: 1
  - scope: "deepfm_1/C2"                      # name-scope prefix
    stream: 2
  - op: [GatherV2, ResourceGather]            # op types
    stream: 3
  - function: ".*encoder.*"                   # matches nothing in this model
    stream: 1
"""


def rules_file(tmp_path, text, name="rules.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def plan(name, path, streams=4, **options):
    view = GraphView(load(SAMPLES / name).graph_def)
    opts = manual(view, RuleOptions(streams=streams, manual=ManualOptions(str(path), **options)))
    return view, opts.partition, opts


# -- selectors and order ---------------------------------------------------------------------------
def test_each_selector_and_first_match_wins(tmp_path):
    path = rules_file(
        tmp_path,
        "rules:\n"
        "  - match: 'input_layer/C1[0-9]_embedding/.*'\n    stream: 1\n"
        "  - scope: input_layer/C2\n    stream: 2\n"
        "  - op: [ResourceGather, FloorMod]\n    stream: 3\n",
    )
    view, partition, opts = plan("deepfm_tf1", path)
    assert partition["input_layer/C12_embedding/embedding_lookup"] == 1  # rule 1 before the op rule
    assert partition["input_layer/C23_embedding/FloorMod"] == 2  # C2x: scope rule before the op rule
    assert partition["input_layer/C5_embedding/embedding_lookup"] == 3
    assert "input_layer/C1_embedding/FloorMod" in partition and partition["input_layer/C1_embedding/FloorMod"] == 3
    assert "C1" not in partition  # the placeholder C1 matches no rule and there is no default
    assert "input_layer/C1_embedding/embedding_weights" not in partition  # 'C1[0-9]' is a full match, not a search
    assert [r["matched"] > 0 for r in opts.report["rules"]] == [True, True, True]
    assert opts.report["unmatched_rules"] == []


def test_function_selector_and_selectors_combined(tmp_path):
    path = rules_file(tmp_path, DEEPFM_TF2_RULES)
    view, partition, opts = plan("deepfm_tf2", path)
    body = "__inference___call___4114"
    assert partition[f"{body}:deepfm_1/C12_embedding_1/GatherV2"] == 1
    assert partition[f"{body}:deepfm_1/C21_embedding_1/GatherV2"] == 2
    assert partition[f"{body}:deepfm_1/C5_embedding_1/GatherV2"] == 3
    assert not any(k.startswith("__inference__traced_save") and v == 1 for k, v in partition.items())
    unmatched = opts.report["unmatched_rules"]
    assert [(r["rule"], r["line"]) for r in unmatched] == [(4, 9)]


def test_default_stream_is_a_fallback_the_constraints_may_move(tmp_path):
    path = rules_file(tmp_path, "default: 2\nrules:\n  - op: ResourceGather\n    stream: 3\n")
    view, partition, opts = plan("deepfm_tf1", path)
    assert partition["C1"] == 2 and "C1" in opts.fallback
    assert "input_layer/C1_embedding/embedding_lookup" not in opts.fallback
    final = make_plan(view, PlanOptions(streams=4, manual=ManualOptions(str(path)))).partition
    assert final["input_layer/C1_embedding/embedding_weights"] == 3  # the table follows its lookup


def test_existing_stream_ids_are_kept_unless_overridden(tmp_path):
    path = rules_file(tmp_path, "rules:\n  - scope: weight_y\n    stream: 0\n  - match: MatMul_1\n    stream: 0\n")
    _, kept, _ = plan("linreg_tf1", path, streams=2)
    assert kept["weight_y"] == 1 and kept["MatMul_1"] == 1 and kept["X"] == 0  # DeepRec's tf.stream ids win
    _, overridden, _ = plan("linreg_tf1", path, streams=2, override=True)
    assert overridden["weight_y"] == 0 and overridden["MatMul_1"] == 0
    in_file = rules_file(tmp_path, "override: true\nrules:\n  - match: MatMul_1\n    stream: 0\n", "all.yaml")
    assert plan("linreg_tf1", in_file, streams=2)[1]["MatMul_1"] == 0
    one_rule = rules_file(
        tmp_path,
        "rules:\n  - match: MatMul_1\n    stream: 0\n    override: true\n  - match: weight_y\n    stream: 0\n",
        "one.yaml",
    )
    _, partition, _ = plan("linreg_tf1", one_rule, streams=2)
    assert partition["MatMul_1"] == 0 and partition["weight_y"] == 1


# -- errors: file, line, what is wrong ---------------------------------------------------------------
@pytest.mark.parametrize(
    "text, line, words",
    [
        ("rules:\n  - match: 'a(b'\n    stream: 1\n", 2, "invalid regex in 'match'"),
        ("rules:\n  - function: '*x'\n    stream: 1\n", 2, "invalid regex in 'function'"),
        ("rules:\n  - scope: a/\n    stream: 1\n    color: red\n", 4, "unknown key 'color'"),
        ("streams: 2\nrules: []\n", 1, "unknown key 'streams'"),
        ("rules:\n  - op: MatMul\n    stream: -1\n", 3, "integer stream id >= 0, got '-1'"),
        ("rules:\n  - op: MatMul\n    stream: one\n", 3, "integer stream id >= 0, got 'one'"),
        ("default: 1.5\nrules: []\n", 1, "'default' must be an integer"),
        ("rules:\n  - op: MatMul\n", 2, "rule 1 has no 'stream'"),
        ("rules:\n  - stream: 1\n", 2, "rule 1 selects nothing"),
        ("rules:\n  - op: MatMul\n    stream: 1\n    op: Add\n", 4, "key 'op' appears twice"),
        ("rules:\n  - op: [MatMul\n    stream: 1\n", 3, "not valid YAML"),
        ("rules: {op: MatMul}\n", 1, "'rules' must be a list"),
        ("override: maybe\nrules: []\n", 1, "'override' must be true or false"),
        ("default: 0\n", 1, "missing key 'rules'"),
    ],
)
def test_malformed_rules_name_file_line_and_problem(tmp_path, text, line, words):
    path = rules_file(tmp_path, text)
    with pytest.raises(InputError) as caught:
        read_rules(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ") and words in message and "\n" not in message


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(InputError, match="is empty"):
        read_rules(rules_file(tmp_path, "# nothing\n"))
    with pytest.raises(InputError, match="cannot read rules file"):
        read_rules(tmp_path / "absent.yaml")


def test_cli_bad_rules_exit_2_with_one_line(msopt, tmp_path):
    path = rules_file(tmp_path, "rules:\n  - match: '[unclosed'\n    stream: 1\n")
    done = msopt("partition", SAMPLES / "towers_tf1", "-n", "2", "--rules", path, "-o", tmp_path / "out")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith(f"msopt: error: {path}:2: invalid regex in 'match'")
    done = msopt(
        "partition", SAMPLES / "towers_tf1", "-n", "2", "--policy", "none", "--rules", path, "-o", tmp_path / "o2"
    )
    assert done.returncode == 2 and "--rules is read by --policy manual" in done.stderr
    done = msopt("partition", SAMPLES / "towers_tf1", "-n", "2", "--policy", "manual", "-o", tmp_path / "o3")
    assert done.returncode == 2 and "needs a rules file" in done.stderr
    assert not (tmp_path / "out").exists()


# -- end to end: written, verified, honoured --------------------------------------------------------
def test_tf1_model_partitioned_verified_and_honoured(msopt, tmp_path):
    path = rules_file(tmp_path, "rules:\n  - scope: tower_1/\n    stream: 1\n  - scope: tower_0/\n    stream: 0\n")
    out = tmp_path / "towers_ms2"
    done = msopt(
        "partition",
        SAMPLES / "towers_tf1",
        "-n",
        "2",
        "--rules",
        path,
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        out,
        "--verify",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["policy"] == "manual" and doc["verify"]["ok"] and doc["unmatched_rules"] == []
    assert doc["nodes_per_stream"][1] >= 10
    model = load(out)
    planned = {n.name: int(n.device[-1]) for n in model.graph_def.node if n.device}
    run = run_probe(out)
    assert run["partitions"] == 2
    ran_tower_1 = [n for n in run["executed"] if n.startswith("tower_1/") and n in planned]
    assert len(ran_tower_1) > 5 and mismatches(planned, run["executed"]) == {}


def test_tf2_keras_model_partitioned_verified_and_honoured(msopt, tmp_path):
    path = rules_file(tmp_path, DEEPFM_TF2_RULES)
    out = tmp_path / "deepfm_ms4"
    done = msopt(
        "partition",
        SAMPLES / "deepfm_tf2",
        "-n",
        "4",
        "--rules",
        path,
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        out,
        "--verify",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert "rule 4" in done.stderr and "matched no node" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["verify"]["ok"] and len(doc["verify"]["signatures"]) == 2
    assert [r["rule"] for r in doc["unmatched_rules"]] == [4]
    assert any("resource" in m["constraint"] for m in doc["constraint_merges"])
    view = GraphView(load(out).graph_def)
    planned = {
        n.key: n.stream
        for n in view.real_nodes()
        if n.stream is not None and n.function.startswith("__inference___call__")
    }
    run = run_probe(out, devices=4, mode="tf2-devices")
    assert "error" not in run
    lookups = [k for k in planned if k.endswith("_embedding_1/GatherV2")]
    assert {planned[k] for k in lookups} == {1, 2, 3}
    assert mismatches({k: planned[k] for k in lookups}, run["executed"]) == {}
    assert mismatches(planned, run["executed"]) == {}
