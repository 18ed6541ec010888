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
from collections import Counter, defaultdict

from msopt.op_tables import FREE_OPS
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
    (msopt.flat.Tasks; default: the run of every main-graph node)."""
    dag = flatten(view, run)
    nodes = view.nodes
    ops = [nodes[k].op if k is not None else "" for k in dag.keys]
    signature = [0] * len(dag)
    for v in dag.order:
        signature[v] = hash((ops[v], tuple(signature[u] for u in dag.preds[v])))
    classes = defaultdict(list)
    for v in dag.order:
        if dag.keys[v] is not None and ops[v] not in FREE_OPS and not nodes[dag.keys[v]].calls:
            classes[signature[v]].append(v)
    sizes = Counter(len(members) for members in classes.values() if len(members) > 1)
    if not sizes:
        return {}
    replicas = max(sizes, key=lambda k: (sizes[k], k))
    branch, place = {}, {}  # place: per class, each member's index in it (made once, when first needed)
    for v in dag.order:  # follow the inputs' branch; a replicated op with none starts its class's branches
        members = classes.get(signature[v])
        if members is None or len(members) != replicas:
            continue
        inherited = next((branch[u] for u in dag.preds[v] if u in branch), None)
        if inherited is None:
            if signature[v] not in place:
                place[signature[v]] = {u: i for i, u in enumerate(members)}
            inherited = place[signature[v]][v]
        branch[v] = inherited
    tower_of = {}
    for v, k in branch.items():
        tower_of.setdefault(dag.keys[v], k)
    return tower_of if len(set(tower_of.values())) > 1 else {}
