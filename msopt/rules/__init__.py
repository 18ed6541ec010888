"""Partition rules: each is a function (GraphView, PartitionOptions) -> {node key: stream}.

Rules are imported lazily by name so that a command pays only for the rule it runs.
"""
from dataclasses import dataclass, field
from importlib import import_module

from msopt.errors import InputError

POLICIES = {
    "none": ("msopt.rules.existing", "keep_existing", "keep the _stream_id attributes already on the nodes"),
}


@dataclass
class PartitionOptions:
    streams: int
    extra: dict = field(default_factory=dict)  # rule-specific options, by name


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
