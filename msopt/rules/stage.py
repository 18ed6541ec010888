"""Policy stage: the input/preprocessing subgraph upstream of a boundary on its own stream (DeepRec's stage_subgraph_stream_id).

The boundary is given as tensor or node names (options.stage.boundary: 'name', 'name:0',
or 'function:name' inside a function body): the stage is everything upstream of them,
themselves included. Found automatically, the stage is the preprocessing ops (parsing,
decoding, string ops, hashing, vocabulary table lookups), everything upstream of them, and
the stateless ops fed only by stage ops or constants (the numeric tail of the parsing, such
as StringToNumber -> Log1p); it stops at the first op that reads model state (a variable or
an embedding table). Checkpoint plumbing (save/restore) never counts. The stage runs on the
last stream (options.stage.stream to choose another), everything else on stream 0.
"""

from msopt.errors import InputError
from msopt.rules.walk import flatten

PREPROCESSING_PREFIXES = (
    "Parse",
    "Decode",
    "String",
    "Regex",
    "StaticRegex",
    "Substr",
    "AsString",
    "LookupTable",
    "Ragged",
    "Unicode",
    "EncodeBase64",
    "DecodeBase64",
)
PREPROCESSING_OPS = frozenset(
    {
        "ReduceJoin",
        "Fingerprint",
        "Bucketize",
        "SparseCross",
        "SparseCrossHashed",
        "SparseCrossV2",
        "DenseBincount",
        "Bincount",
    }
)
STATE_OPS = frozenset(
    {
        "VarHandleOp",
        "VariableV2",
        "Variable",
        "ReadVariableOp",
        "KvVarHandleOp",
        "ResourceGather",
        "KvResourceGather",
        "ResourceGatherNd",
    }
)
CHECKPOINT_OPS = frozenset(
    {"SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename", "Save", "Restore", "SaveSlices", "RestoreSlice"}
)


def stage(view, options):
    streams = options.streams
    target = streams - 1 if options.stage.stream is None else options.stage.stream
    if streams < 2 or target == 0:
        return {}
    dag = flatten(view, options.run)
    boundary = options.stage.boundary
    members = upstream(dag, boundary_vertices(view, dag, boundary)) if boundary else automatic_stage(view, dag)
    return {dag.keys[v]: target for v in members if view.nodes[dag.keys[v]].proto is not None}


def boundary_vertices(view, dag, names):
    """The vertices of the named nodes ('name', 'name:0', 'function:name')."""
    found = []
    for name in names:
        base, _, port = name.rpartition(":")
        key = name if name in dag.first else base if port.isdigit() and base in dag.first else None
        if key is None:
            known = name in view.nodes or (port.isdigit() and base in view.nodes)
            raise InputError(
                f"stage boundary '{name}' "
                + ("is a node the planned signature does not run" if known else "names no node of the model")
            )
        found.append(dag.first[key])
    return found


def upstream(dag, vertices):
    seen = set(vertices)
    pending = list(vertices)
    while pending:
        for u in dag.preds[pending.pop()]:
            if u not in seen:
                seen.add(u)
                pending.append(u)
    return seen


def is_preprocessing(op):
    return op in PREPROCESSING_OPS or op.startswith(PREPROCESSING_PREFIXES)


def automatic_stage(view, dag):
    """Preprocessing ops, their ancestors and their stateless tail, without checkpoint plumbing."""
    nodes = view.nodes
    ops = dag.ops
    present = set(ops)
    preprocessing = {op for op in present if is_preprocessing(op)}
    if not preprocessing:
        return set()
    checkpoint = _checkpoint_only(dag, ops) if not CHECKPOINT_OPS.isdisjoint(present) else set()
    seeds = [v for v, op in enumerate(ops) if op in preprocessing and v not in checkpoint]
    if not seeds:
        return set()
    members = {v for v in upstream(dag, seeds) if v not in checkpoint and ops[v] not in STATE_OPS}
    for v in dag.order:  # the stateless tail: every input from the stage or a constant
        if v in members or ops[v] in STATE_OPS or ops[v] in CHECKPOINT_OPS:
            continue
        preds = dag.preds[v]
        if preds and all(u in members or ops[u] == "Const" for u in preds) and any(u in members for u in preds):
            if not nodes[dag.keys[v]].calls:
                members.add(v)
    return members


def _checkpoint_only(dag, ops):
    """Vertices whose every path leads only into checkpoint ops (save/restore plumbing)."""
    only = set()
    for v in reversed(dag.order):
        succs = dag.succs[v]
        if ops[v] in CHECKPOINT_OPS or (succs and all(w in only for w in succs)):
            only.add(v)
    return only
