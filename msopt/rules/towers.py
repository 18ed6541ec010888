"""Policy towers: replicated subgraphs, one per stream (data-parallel towers on one GPU).

Replicas are found by name first: a name-scope component tower_<k>, tower<k> or replica_<k>
(the multi-GPU article's tower_0/tower_1, Keras' replica_1...) puts a node in tower k. With
no such scope, structurally identical branches are found: each op gets a signature hashed
from its op type and its inputs' signatures, so ops with equal signatures compute the same
function of the same inputs; a signature shared by exactly k mutually independent compute ops
(k the most common such count) marks k replicas, and each replica's ops follow the branch
their inputs are on. Tower k goes to stream k mod N; shared ops stay on stream 0.
"""

import re
from operator import attrgetter

import numpy as np

from msopt.compiled.jit import compiled
from msopt.graph.op_tables import FREE_OPS
from msopt.graph.tasks import codes_in
from msopt.rules.walk import flatten

TOWER_SCOPE = re.compile(r"^(?:tower|replica)_?(\d+)$")


def towers(view, options):
    streams = options.streams
    if streams < 2:
        return {}
    by_name = named_towers(view)
    tower_of = by_name if by_name else identical_branches(view, options.run)
    return {key: k % streams for key, k in tower_of.items()}


def named_towers(view):
    """{node key: tower index} from tower_<k> / replica_<k> name scopes (the innermost such scope)."""
    names = "\n".join(map(attrgetter("name"), view.real_nodes()))
    if "tower" not in names and "replica" not in names:  # what TOWER_SCOPE needs, tested once for the whole view
        return {}
    found = {}
    for node in view.real_nodes():
        if "tower" not in node.name and "replica" not in node.name:  # what TOWER_SCOPE needs, tested cheaply
            continue
        for part in reversed(node.name.split("/")[:-1]):
            match = TOWER_SCOPE.match(part)
            if match:
                found[node.key] = int(match.group(1))
                break
    return found if len(set(found.values())) > 1 else {}


def identical_branches(view, run=None):
    """{node key: branch index} for structurally identical, mutually independent branches of ``run``
    (msopt.graph.flat.Tasks; default: the run of every main-graph node)."""
    dag = flatten(view, run)
    n = len(dag)
    order = np.asarray(dag.order, np.int64)
    names, codes = dag.op_codes()
    signature = np.zeros(n, np.uint64)
    _signatures(order, dag.pred_ptr, dag.pred_idx, codes.astype(np.uint64), signature)
    # The ops a replica is made of: compute ops (no bookkeeping, no calls), in classes of equal signature.
    eligible = ~codes_in(names, codes, FREE_OPS)
    calling = {key for info in view.functions.values() for key in info.callers}  # the nodes with calls
    if calling:
        eligible &= np.fromiter((key not in calling for key in dag.keys), bool, n)
    members = order[eligible[order]]  # in the order the classes list them
    _, cls, size = np.unique(signature[members], return_inverse=True, return_counts=True)
    sizes, count = np.unique(size[size > 1], return_counts=True)
    if not len(sizes):
        return {}
    replicas = int(sizes[np.lexsort((sizes, count))[-1]])  # the most common class size, the larger on a tie
    # Each member's place in its class, for the members of classes of ``replicas`` ops.
    by_class = np.argsort(cls, kind="stable")
    place = np.empty(len(members), np.int64)
    place[by_class] = np.arange(len(members)) - np.repeat(np.cumsum(size) - size, size)
    chosen = size[cls] == replicas
    start = np.full(n, -1, np.int64)  # per vertex: its place in its class if it is replicated, else -1
    start[members[chosen]] = place[chosen]
    branch = np.full(n, -1, np.int64)
    _follow_inputs(order, dag.pred_ptr, dag.pred_idx, start, branch)
    tower_of = {}
    found = order[branch[order] >= 0]
    for key, k in zip(map(dag.keys.__getitem__, found.tolist()), branch[found].tolist()):
        tower_of.setdefault(key, k)
    return tower_of if len(set(tower_of.values())) > 1 else {}


_MIX1, _MIX2, _SEED = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


@compiled
def _signatures(order, pred_ptr, pred_idx, op_code, signature):
    """Fills ``signature``: per vertex (each after its predecessors, as the run numbers them), a 64-bit hash of
    its op type and its predecessors' signatures in their order, in ``order`` (splitmix64's finalizer per step), so ops of
    equal signature compute the same function of the same inputs (up to a 2**-64 collision)."""
    for k in range(len(order)):
        v = order[k]
        h = _splitmix(op_code[v] + _SEED)
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            h = _splitmix(h * _SEED + signature[pred_idx[j]])
        signature[v] = h


@compiled
def _splitmix(z):
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@compiled
def _follow_inputs(order, pred_ptr, pred_idx, start, branch):
    """Fills ``branch``: each replicated vertex (``start[v] >= 0``, in order) takes the branch of its first input
    on one, else starts its own: its place in its class."""
    for k in range(len(order)):
        v = order[k]
        if start[v] < 0:
            continue
        inherited = -1
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            if branch[pred_idx[j]] >= 0:
                inherited = branch[pred_idx[j]]
                break
        branch[v] = inherited if inherited >= 0 else start[v]
