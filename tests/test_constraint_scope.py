"""The constraints' groups for a plan's scope: the whole view's groups that reach it, in the same order.

msopt.planning.links links only the function bodies a group reaching the scope enters (and the
bodies calling them); these tests compare that with linking every body of a fresh view.
"""

import random

import pytest

from msopt.graph.flat import flat_run
from msopt.planning.links import view_constraints

pytestmark = pytest.mark.tf

MODELS = ["linreg_tf1", "linreg_tf2", "deepfm_tf1", "deepfm_tf2", "stage_tf1", "stage_tf2", "towers_tf1", "towers_tf2"]


def scopes(model, view, seed):
    """The signature's run, and single real nodes of every body (a read inside a callee reaches its caller)."""
    run = frozenset(key for key in flat_run(view, model)[1].key if key is not None)
    keys = sorted(node.key for node in view.real_nodes())
    picked = random.Random(seed).sample(keys, min(40, len(keys)))
    return [run, *(frozenset([key]) for key in picked)]


@pytest.mark.parametrize("name", MODELS)
def test_scoped_groups_are_the_whole_views_groups_reaching_the_scope(sample_view, name):
    model, whole = sample_view(name)
    all_host, all_groups = view_constraints(whole, None)
    assert all_groups, "every sample model has linked groups"
    reached = 0
    for scope in scopes(model, whole, seed=len(name)):
        _, view = sample_view(name)  # a fresh view: nothing linked yet
        host, groups = view_constraints(view, scope)
        expected = [group for group in all_groups if not scope.isdisjoint(group[0])]
        assert groups == expected, sorted(scope)[:3]
        assert host == all_host & scope
        reached += bool(groups)
    assert reached > 1, "some scopes reach a group"


def test_a_read_inside_a_body_reaches_the_variable_in_the_main_graph(sample_view):
    """A TF2 variable is a main-graph VarHandleOp passed into the bodies reading it: a scope holding only such a
    read still gets the whole group, the handle and the caller's side included."""
    _, view = sample_view("linreg_tf2")
    called = {name for name, info in view.functions.items() if info.callers}
    reads = [n.key for n in view.real_nodes() if n.op == "ReadVariableOp" and n.function in called]
    assert reads
    _, groups = view_constraints(view, frozenset(reads[:1]))
    (keys, kinds) = groups[0]
    assert "resource" in kinds
    assert any(view.nodes[k].op == "VarHandleOp" and not view.nodes[k].function for k in keys)
    assert "__inference__traced_save" in " ".join(keys), "the saver's read of the same variable joins too"
