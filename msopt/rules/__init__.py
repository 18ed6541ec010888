"""Partition rules: each is a function (GraphView, PartitionOptions) -> {node key: stream}.

Rules are imported lazily by name so that a command pays only for the rule it runs.
"""
from dataclasses import dataclass, field
from importlib import import_module

from msopt.errors import InputError

POLICIES = {
    "none": ("msopt.rules.existing", "keep_existing", "keep the _stream_id attributes already on the nodes"),
    "manual": ("msopt.rules.manual", "manual", "a rules file (--rules): node name regex, scope, op type or function -> stream"),
    "auto": ("msopt.rules.auto", "auto", "cost-aware schedule over at most N streams, best simulated makespan (default)"),
    "chains": ("msopt.rules.chains", "chains", "path cover of the graph (Nimble / FULL_GRAPH_PARTITION) folded onto N streams"),
    "embedding": ("msopt.rules.embedding", "embedding", "each feature's embedding lookup on a stream, balanced by cost"),
    "towers": ("msopt.rules.towers", "towers", "replicated towers (tower_k, replica_k, identical branches) one per stream"),
    "stage": ("msopt.rules.stage", "stage", "input/preprocessing subgraph upstream of a boundary on its own stream"),
    "collective": ("msopt.rules.collective", "collective", "communication ops (NCCL, Collective*, Horovod, Send/Recv) on their own stream"),
}


@dataclass
class PartitionOptions:
    streams: int
    extra: dict = field(default_factory=dict)  # rule-specific options, by name
    rules: str = None  # manual: path of the rules file
    override: bool = False  # manual: rules win over existing _stream_id attributes
    const_dup: bool = True  # copy Const nodes into each consuming stream instead of copying their value
    fallback: set = field(default_factory=set)  # nodes a rule placed only by default: constraints may move them freely
    report: dict = field(default_factory=dict)  # entries a rule adds to the partition report (manual: rules matched)
    notes: list = field(default_factory=list)  # sentences for the user (auto: what it chose, why fewer streams)


def make_plan(name, view, options):
    """Run rule ``name``, check its stream ids, then enforce the placement constraints.

    Returns (partition, merges): merges lists each change the constraints made.
    """
    from msopt.constraints import apply
    from msopt.partition import check_range

    raw = run_policy(name, view, options)
    check_range(raw, options.streams, {key: f"policy {name}" for key in raw} if name != "none" else None)
    return apply(view, raw, options.streams, options)


def run_policy(name, view, options):
    if name not in POLICIES:
        raise InputError(f"unknown policy '{name}'; choose one of: {', '.join(POLICIES)}")
    module, function, _ = POLICIES[name]
    return getattr(import_module(module), function)(view, options)
