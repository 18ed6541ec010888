"""Policies embedding, towers, stage and collective: what each finds on hand-built graphs and sample models, and --verify."""

import json
from collections import Counter

import pytest
from conftest import SAMPLES

from msopt.graph.view import GraphView
from msopt.load import load
from msopt.rules import CollectiveOptions, RuleOptions, StageOptions, run_rule
from msopt.rules.embedding import feature_subgraphs

pytestmark = pytest.mark.tf


def plan(v, policy, streams, **extra):
    options = RuleOptions(
        streams=streams,
        stage=StageOptions(tuple(extra.get("boundary", ()))),
        collective=CollectiveOptions(extra.get("collective_stream")),
    )
    return run_rule(policy, v, options).partition


# -- embedding ---------------------------------------------------------------------------------
def test_embedding_finds_each_deepfm_feature_with_its_id_transform(sample_view):
    v = sample_view("deepfm_tf1")[1]
    features = feature_subgraphs(v)
    assert len(features) == 24
    c7 = next(f for f in features if "input_layer/C7_embedding/embedding_lookup" in f)
    assert {"C7", "input_layer/C7_embedding/FloorMod", "input_layer/C7_embedding/embedding_lookup/Identity"} <= c7
    assert not any(k.startswith("input_layer/C8") for k in c7)


def test_embedding_balances_equal_features_evenly(sample_view):
    p = plan(sample_view("deepfm_tf1")[1], "embedding", 4)
    lookups = Counter(s for k, s in p.items() if k.endswith("/embedding_lookup"))
    assert lookups == {0: 6, 1: 6, 2: 6, 3: 6}


def test_embedding_balances_by_cost_not_round_robin(hand_view):
    # One heavy feature (three kernels before the gather) and three light ones on 2 streams:
    # longest first puts the heavy one alone; round-robin would pair it with a light one.
    spec = [("table", "VarHandleOp", [])]
    for f, depth in (("a", 3), ("b", 0), ("c", 0), ("d", 0)):
        prev = f"{f}_ids"
        spec.append((prev, "Placeholder", []))
        for i in range(depth):
            spec.append((f"{f}_hash{i}", "FloorMod", [prev]))
            prev = f"{f}_hash{i}"
        spec.append((f"{f}_lookup", "ResourceGather", ["table", prev]))
    spec.append(("concat", "ConcatV2", [f"{f}_lookup" for f in "abcd"]))
    p = plan(hand_view(spec), "embedding", 2)
    heavy = p["a_lookup"]
    assert all(p[f"{f}_lookup"] != heavy for f in "bcd")


def test_embedding_does_not_apply_without_lookups(sample_view):
    assert plan(sample_view("towers_tf1")[1], "embedding", 4) == {}


def test_embedding_finds_the_stage_models_three_lookups(sample_view):
    assert len(feature_subgraphs(sample_view("stage_tf1")[1])) == 3
    assert len(feature_subgraphs(sample_view("deepfm_tf2")[1])) == 24


# -- towers ------------------------------------------------------------------------------------
def test_towers_by_scope_name(sample_view):
    p = plan(sample_view("towers_tf1")[1], "towers", 2)
    assert {s for k, s in p.items() if "tower_0/" in k} == {0}
    assert {s for k, s in p.items() if "tower_1/" in k} == {1}


def test_towers_in_tf2_function_bodies(sample_view):
    p = plan(sample_view("towers_tf2")[1], "towers", 4)
    assert {s for k, s in p.items() if ":tower_1/" in k} == {1}
    assert {s for k, s in p.items() if ":tower_0/" in k} == {0}


def test_towers_by_structure_when_unnamed(hand_view):
    v = hand_view(
        [
            ("x", "Placeholder", []),
            ("a1", "Conv2D", ["x"]),
            ("a2", "Relu", ["a1"]),
            ("b1", "Conv2D", ["x"]),
            ("b2", "Relu", ["b1"]),
            ("c1", "Conv2D", ["x"]),
            ("c2", "Relu", ["c1"]),
            ("j", "AddN", ["a2", "b2", "c2"]),
        ]
    )
    p = plan(v, "towers", 4)
    assert p["a1"] == p["a2"] and p["b1"] == p["b2"] and p["c1"] == p["c2"]
    assert len({p["a1"], p["b1"], p["c1"]}) == 3
    assert "j" not in p and "x" not in p


def test_towers_fold_modulo_streams(sample_view):
    p = plan(sample_view("towers_tf1")[1], "towers", 1)
    assert p == {}


# -- stage -------------------------------------------------------------------------------------
def test_stage_found_automatically(sample_view):
    p = plan(sample_view("stage_tf1")[1], "stage", 2)
    assert set(p.values()) == {1}
    for key in (
        "preprocess/StringToHashBucketFast",
        "preprocess/StringSplit/StringSplitV2",
        "preprocess/stack",
        "preprocess/Log1p",
        "lines",
    ):
        assert key in p
    for key in ("model/embedding_lookup", "model/MatMul", "save/SaveV2", "save/StringJoin", "stage/emb_id"):
        assert key not in p


def test_stage_with_a_given_boundary_is_everything_upstream(sample_view):
    p = plan(sample_view("stage_tf1")[1], "stage", 3, boundary=["preprocess/stack:0"])
    assert set(p.values()) == {2}
    assert "preprocess/Log1p_2" in p and "preprocess/StringLength" in p and "lines" in p
    assert "preprocess/StringToHashBucketFast" not in p  # not upstream of the boundary


def test_stage_does_not_apply_to_a_model_without_preprocessing(sample_view):
    assert plan(sample_view("towers_tf1")[1], "stage", 2) == {}


def test_stage_bad_boundary_is_bad_input(msopt, tmp_path):
    result = msopt(
        "partition", SAMPLES / "stage_tf1", "--policy", "stage", "--boundary", "no/such:0", "-o", tmp_path / "o"
    )
    assert result.returncode == 2
    assert result.stderr.startswith("msopt: error: stage boundary 'no/such:0'")


# -- collective --------------------------------------------------------------------------------
def test_collective_ops_go_to_their_own_stream(hand_view, sample_view):
    v = hand_view(
        [
            ("x", "Placeholder", []),
            ("g", "MatMul", ["x", "x"]),
            ("nccl", "NcclAllReduce", ["g"]),
            ("coll", "CollectiveReduceV2", ["g"]),
            ("hvd", "HorovodAllreduce", ["g"]),
            ("send", "_Send", ["g"]),
            ("recv", "_Recv", []),
            ("y", "AddN", ["nccl", "coll", "hvd", "recv"]),
        ]
    )
    assert plan(v, "collective", 4) == {"nccl": 3, "coll": 3, "hvd": 3, "send": 3, "recv": 3}
    assert plan(v, "collective", 4, collective_stream=2)["nccl"] == 2
    assert plan(v, "collective", 1) == {}
    assert plan(sample_view("deepfm_tf1")[1], "collective", 2) == {}


# -- every built-in partition of the sample models runs bitwise identically -----------------------
@pytest.mark.parametrize(
    "name,policy",
    [
        ("deepfm_tf1", "embedding"),
        ("deepfm_tf2", "embedding"),
        ("stage_tf1", "embedding"),
        ("towers_tf1", "towers"),
        ("towers_tf2", "towers"),
        ("stage_tf1", "stage"),
        ("stage_tf2", "stage"),
    ],
)
def test_builtin_policy_verifies(msopt, sample, tmp_path, name, policy):
    result = msopt(
        "partition",
        sample(name),
        "--streams",
        4,
        "--policy",
        policy,
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
    doc = json.loads(result.stdout)
    assert doc["verify"]["ok"]
    assert sum(1 for n in doc["nodes_per_stream"] if n) > 1


COLLECTIVE_MODEL = """
import os, sys; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf

class Model(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.reshape(tf.range(12, dtype=tf.float32), [4, 3]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def serve(self, x):
        g = tf.matmul(x, self.w)
        r = tf.raw_ops.CollectiveReduceV2(input=g, group_size=1, group_key=1, instance_key=1, ordering_token=[],
                                          merge_op="Add", final_op="Id")
        return {"y": tf.nn.relu(r) + 1.0}

model = Model()
tf.saved_model.save(model, sys.argv[1], signatures={"serving_default": model.serve})
"""
RUN_ON_TWO_CPUS = """
import os, sys; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
model = tf.saved_model.load(sys.argv[1])
x = np.arange(8, dtype=np.float32).reshape(2, 4)
print(model.signatures["serving_default"](x=tf.constant(x))["y"].numpy().tobytes().hex())
"""


def test_collective_op_on_its_own_stream_computes_the_same(msopt, tmp_path):
    # A one-member collective group runs on one CPU. msopt's --verify runs both models in one process,
    # where the second would join the first one's (full) group, so each model runs in its own process.
    import subprocess
    import sys

    original, rewritten = tmp_path / "collective", tmp_path / "collective_ms2"
    subprocess.run(
        [sys.executable, "-c", COLLECTIVE_MODEL, str(original)], check=True, capture_output=True, timeout=300
    )
    result = msopt(
        "partition",
        original,
        "--streams",
        2,
        "--policy",
        "collective",
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        rewritten,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["nodes_per_stream"][1] == 1
    moved = [n for n in GraphView(load(rewritten).graph_def).real_nodes() if n.op == "CollectiveReduceV2"]
    assert [n.device for n in moved] == ["/device:CPU:1"]
    outputs = [
        subprocess.run(
            [sys.executable, "-c", RUN_ON_TWO_CPUS, str(path)], check=True, capture_output=True, text=True, timeout=300
        ).stdout.strip()
        for path in (original, rewritten)
    ]
    assert outputs[0] and outputs[0] == outputs[1]
