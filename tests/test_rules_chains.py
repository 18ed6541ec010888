"""Policy chains and the flat DAG walk: hand-built graphs whose path cover is known exactly, and the sample models."""

import json
import random

import pytest

from msopt.graph.view import GraphView
from msopt.planning.plan import plan_rule
from msopt.rules import RuleOptions, run_rule
from msopt.rules.chains import path_cover
from msopt.rules.walk import flatten

pytestmark = pytest.mark.tf


def plan(v, streams, policy="chains"):
    return run_rule(policy, v, RuleOptions(streams=streams)).partition


def cross_edges(v, partition):
    return sum(partition.get(src, 0) != partition.get(dst, 0) for src, dst, _ in v.edges())


def test_diamond_needs_two_chains_and_exactly_two_cross_edges(diamond):
    v = diamond()
    p = plan(v, 2)
    assert len(set(p.values())) == 2
    assert cross_edges(v, p) == 2  # a fork and a join: the fewest syncs any 2-stream plan of a diamond has
    assert p["b"] != p["c"]  # the two independent ops run concurrently


def test_independent_chains_get_their_own_streams_with_no_sync(hand_view):
    v = hand_view(
        [
            ("x0", "Relu", []),
            ("x1", "Relu", ["x0"]),
            ("x2", "Relu", ["x1"]),
            ("y0", "Relu", []),
            ("y1", "Relu", ["y0"]),
            ("y2", "Relu", ["y1"]),
        ]
    )
    p = plan(v, 4)
    assert p["x0"] == p["x1"] == p["x2"] != p["y0"] == p["y1"] == p["y2"]
    assert cross_edges(v, p) == 0


def test_one_stream_puts_everything_on_stream_zero(diamond):
    assert set(plan(diamond(), 1).values()) == {0}


def test_out_tree_needs_one_chain_per_leaf(hand_view):
    # A binary out-tree of depth 3: 8 leaves, so a minimum path cover has exactly 8 paths.
    spec = [("n1", "Relu", [])]
    for i in range(2, 16):
        spec.append((f"n{i}", "Relu", [f"n{i // 2}"]))
    chains = path_cover(flatten(hand_view(spec)))
    assert len(set(chains)) == 8


def test_in_tree_needs_one_chain_per_leaf(hand_view):
    spec = [(f"n{i}", "Relu", []) for i in range(8, 16)]
    for i in range(7, 0, -1):
        spec.append((f"n{i}", "AddV2", [f"n{2 * i}", f"n{2 * i + 1}"]))
    assert len(set(path_cover(flatten(hand_view(spec))))) == 8


@pytest.fixture
def random_layered(hand_view):
    """``build(size, seed)``: a random layered DAG of AddV2 ops over 8 placeholders, each reading 1-3 of the 24
    ops before it."""

    def build(size, seed):
        rng = random.Random(seed)
        spec = []
        for i in range(size):
            if i < 8:
                spec.append((f"n{i}", "Placeholder", []))
            else:
                spec.append(
                    (
                        f"n{i}",
                        "AddV2",
                        sorted({f"n{rng.randrange(max(0, i - 24), i)}" for _ in range(rng.choice((1, 2, 3)))}),
                    )
                )
        return hand_view(spec)

    return build


def test_chains_are_paths_of_the_graph_so_no_concurrency_is_lost(random_layered):
    v = random_layered(3000, seed=1)
    dag = flatten(v)
    chain_of = path_cover(dag)
    members = {}
    for vertex in dag.order:
        members.setdefault(chain_of[vertex], []).append(vertex)
    for chain in members.values():
        for a, b in zip(chain, chain[1:]):
            assert a in dag.preds[b]  # consecutive ops of a chain are joined by an edge: ordered anyway


def minimum_path_cover(dag):
    """n minus a maximum matching of (vertex, successor) pairs: Kuhn's exact algorithm, fine for small graphs."""
    matched = {}

    def augment(u, seen):
        for w in dag.succs[u]:
            if w not in seen:
                seen.add(w)
                if w not in matched or augment(matched[w], seen):
                    matched[w] = u
                    return True
        return False

    return len(dag) - sum(augment(u, set()) for u in range(len(dag)))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_path_cover_is_the_minimum(random_layered, seed):
    dag = flatten(random_layered(600, seed))
    assert len(set(path_cover(dag))) == minimum_path_cover(dag)


def test_path_cover_is_the_minimum_where_a_greedy_matching_is_not(hand_view):
    # a0 -> b0, a0 -> b1, a1 -> b0: matching a0 with b0 first (the lower ids) leaves a1 and b1 unmatched,
    # 3 chains; the minimum is 2 (a0 -> b1, a1 -> b0).
    v = hand_view([("a0", "Relu", []), ("a1", "Relu", []), ("b0", "AddV2", ["a0", "a1"]), ("b1", "Relu", ["a0"])])
    dag = flatten(v)
    chain_of = path_cover(dag)
    assert len(set(chain_of)) == minimum_path_cover(dag) == 2


def test_folding_never_exceeds_the_stream_count(random_layered):
    v = random_layered(2000, seed=2)
    for streams in (1, 2, 3, 8):
        p, _ = plan_rule("chains", v, streams)
        assert set(p.values()) <= set(range(streams))
        assert len(set(p.values())) == streams


def test_function_bodies_are_inlined_in_place_of_their_calls(hand_graph):
    graph = hand_graph([("x", "Placeholder", []), ("call", "StatefulPartitionedCall", ["x"]), ("y", "Relu", ["call"])])
    graph.node[1].attr["f"].func.name = "body"
    fdef = graph.library.function.add()
    fdef.signature.name = "body"
    fdef.signature.input_arg.add(name="a")
    fdef.signature.output_arg.add(name="out")
    fdef.node_def.add(name="k", op="Const")
    fdef.node_def.add(name="m", op="Mul", input=["a", "k:output:0"])
    fdef.ret["out"] = "m:z:0"
    v = GraphView(graph)
    dag = flatten(v)
    position = {dag.keys[u]: i for i, u in enumerate(dag.order) if dag.keys[u] is not None}
    assert position["x"] < position["body:m"] < position["y"]
    assert "call" not in dag.first  # a run executes no op for a call: its body runs in its place
    assert dag.first["x"] in dag.preds[dag.first["body:m"]]  # the body's argument reads the call's input
    assert dag.first["body:m"] in dag.preds[dag.first["y"]]  # the call's consumer reads the body's return
    assert dag.callers[dag.first["body:m"]] == ("call",)
    p = plan(v, 2)
    assert "body:a" not in p and "call" not in p  # virtual argument nodes and calls are never assigned


def test_v1_while_loop_back_edges_do_not_make_a_cycle(hand_view):
    v = hand_view(
        [
            ("x", "Placeholder", []),
            ("enter", "Enter", ["x"]),
            ("merge", "Merge", ["enter", "next"]),
            ("body", "Relu", ["merge"]),
            ("next", "NextIteration", ["body"]),
            ("exit", "Exit", ["merge"]),
        ]
    )
    dag = flatten(v)
    order = [dag.keys[u] for u in dag.order]
    assert order.index("merge") < order.index("body") < order.index("next")


@pytest.mark.parametrize(
    "name", ["linreg_tf1", "towers_tf1", "towers_tf2", "stage_tf1", "stage_tf2", "deepfm_tf1", "deepfm_tf2"]
)
def test_chains_on_sample_models_verifies(msopt, sample, tmp_path, name):
    out = tmp_path / "out"
    result = msopt(
        "partition",
        sample(name),
        "--streams",
        4,
        "--policy",
        "chains",
        "--placement",
        "device",
        "--device-type",
        "cpu",
        "-o",
        out,
        "--verify",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verify"]["ok"]
    assert sum(1 for n in doc["nodes_per_stream"] if n) > 1  # the samples all have independent branches


@pytest.mark.slow
def test_chains_on_mobilenet_v2_verifies(msopt, mobilenet_v2, tmp_path):
    result = msopt(
        "partition",
        mobilenet_v2,
        "--streams",
        4,
        "--policy",
        "chains",
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
    # The serving run of MobileNetV2 is a chain of blocks with at most a residual branch beside the convs, so
    # its plan uses several streams but not necessarily all four (the functions no signature runs get none).
    assert doc["verify"]["ok"] and len([n for n in doc["nodes_per_stream"] if n]) > 1


PLAN_DIGEST = """
import hashlib, json, sys
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.rules import RuleOptions, run_rule
view = GraphView(load(sys.argv[1]).graph_def)
plans = {p: sorted(run_rule(p, view, RuleOptions(streams=4)).partition.items()) for p in ("chains", "towers", "embedding", "stage")}
print(hashlib.sha256(json.dumps(plans).encode()).hexdigest())
"""


def test_plans_do_not_depend_on_the_process_hash_seed():
    # Protobuf map iteration order (function calls, returns) varies between processes; plans must not.
    import os
    import subprocess
    import sys

    from conftest import SAMPLES

    digests = {
        subprocess.run(
            [sys.executable, "-c", PLAN_DIGEST, str(SAMPLES / "stage_tf2")],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1


def test_minimum_chains_plans_every_op_within_the_streams(random_layered):
    from msopt.rules.chains import minimum_chains

    v = random_layered(2000, seed=3)
    p = minimum_chains(v, RuleOptions(streams=3))
    assert set(p) == set(plan(v, 3)) and set(p.values()) <= {0, 1, 2}
    assert len(set(p.values())) == 3


def test_the_flat_dag_is_built_once_per_view_and_constraints_match_a_fresh_view(random_layered):
    from msopt.planning.constraints import apply

    v = random_layered(500, seed=4)
    assert flatten(v) is flatten(v)
    p = plan(v, 4)
    fresh = random_layered(500, seed=4)
    assert apply(v, p, 4) == apply(v, p, 4) == apply(fresh, p, 4)
