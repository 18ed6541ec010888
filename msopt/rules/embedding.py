"""Policy embedding: each feature's embedding lookup subgraph on a stream, balanced by cost (DeepRec's EMBEDDING_GRAPH_PARTITION).

A lookup is a gather from an embedding table (Gather, GatherV2, ResourceGather, DeepRec's
KvResourceGather) or a sparse segment reduction (SparseSegmentSum/Mean/SqrtN, what
embedding_lookup_sparse ends in). Its feature subgraph grows backwards over the ops only it
consumes (the id transform: FloorMod, StringToHashBucket*, table lookups, casts, the
feature's own input) and forwards over the ops fed only by it (Identity, the sparse combiner,
reshapes) up to the join where features meet. Subgraphs that overlap are one feature. The
features are then placed longest-first on the least-loaded stream (cost from the cost model,
else one unit per kernel), instead of DeepRec's round-robin. The rest stays on stream 0.
"""

from msopt.rules.walk import flatten, vertex_costs

LOOKUP_OPS = frozenset(
    {
        "Gather",
        "GatherV2",
        "ResourceGather",
        "KvResourceGather",
        "ResourceGatherNd",
        "SparseSegmentSum",
        "SparseSegmentMean",
        "SparseSegmentSqrtN",
        "SparseSegmentSumWithNumSegments",
        "SparseSegmentMeanWithNumSegments",
        "SparseSegmentSqrtNWithNumSegments",
    }
)
TABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "KvVarHandleOp", "_Arg"})
SHARED_SOURCES = frozenset(
    {"VarHandleOp", "VariableV2", "Variable", "KvVarHandleOp", "HashTableV2", "MutableHashTableV2"}
)


def embedding(view, options):
    features = feature_subgraphs(view)
    if not features:
        return {}
    dag = flatten(view, options.run)
    cost = vertex_costs(view, dag, options)
    per_key = {key: cost[v] for key, v in dag.first.items()}
    return balance(features, per_key, options.streams)


def is_lookup(view, node):
    """A gather whose table (input 0) comes from a variable, or a sparse segment reduction."""
    if node.op not in LOOKUP_OPS or not node.inputs:
        return False
    if node.op.startswith("SparseSegment"):
        return True
    table = view.nodes.get(node.inputs[0][0])
    return table is not None and (table.op in TABLE_OPS or table.op.startswith("Var"))


def feature_subgraphs(view):
    """[set of node keys], one per feature, in the order the lookups appear."""
    owner = {}  # node key -> feature index
    groups = []
    for node in view.of_ops(LOOKUP_OPS.__contains__):
        if not is_lookup(view, node) or node.key in owner:
            continue
        group = grow(view, {node.key}, owner)
        touching = {owner[k] for k in group if k in owner}
        if touching:  # overlaps earlier features: one feature
            target = min(touching)
            for other in sorted(touching - {target}):
                groups[target] |= groups[other]
                groups[other] = set()
            groups[target] |= group
            for key in groups[target]:
                owner[key] = target
        else:
            groups.append(group)
            for key in group:
                owner[key] = len(groups) - 1
    return [g for g in groups if g]


def grow(view, group, owner):
    """The lookup plus the ops only it consumes (backwards) and the ops only it feeds (forwards)."""
    nodes = view.nodes
    pending = list(group)
    while pending:
        key = pending.pop()
        node = nodes[key]
        for src in [*(s for s, _ in node.inputs), *node.control_inputs]:
            other = nodes[src]
            if src in group or other.proto is None or other.op in SHARED_SOURCES:
                continue
            if all(consumer in group for consumer in other.outputs):
                group.add(src)
                pending.append(src)
        for dst in node.outputs:
            if dst in group or dst in owner:
                continue
            consumer = nodes[dst]
            if not consumer.calls and not _feeds_from_outside(consumer, group):
                group.add(dst)
                pending.append(dst)
    return group


def _feeds_from_outside(node, group):
    return any(src not in group for src, _ in node.inputs) or any(src not in group for src in node.control_inputs)


def balance(features, cost, streams):
    """Longest-processing-time first: each feature to the stream with the least work so far."""
    load = [0.0] * streams
    plan = {}
    weighted = sorted(
        ((sum(cost.get(k, 0.0) for k in f), i) for i, f in enumerate(features)), key=lambda t: (-t[0], t[1])
    )
    for work, i in weighted:
        s = min(range(streams), key=lambda j: (load[j], j))
        load[s] += work if work > 0 else 1e-9
        for key in features[i]:
            plan[key] = s
    return plan
