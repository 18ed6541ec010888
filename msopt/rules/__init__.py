"""Partition rules: each is a pure function (GraphView, RuleOptions) -> {node key: stream} or a RuleResult.

Rules are imported lazily by name so that a command pays only for the rule it runs. Policy auto
is listed here too, but it is a search above the rules (msopt.rules.auto), run by the plan layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from msopt.errors import InputError

AUTO = "auto"
POLICIES = {
    "none": ("msopt.rules.existing", "keep_existing", "keep the _stream_id attributes already on the nodes"),
    "manual": (
        "msopt.rules.manual",
        "manual",
        "a rules file (--rules): node name regex, scope, op type or function -> stream",
    ),
    "auto": (
        "msopt.rules.auto",
        "search",
        "cost-aware schedule over at most N streams, best simulated makespan (default)",
    ),
    "chains": (
        "msopt.rules.chains",
        "chains",
        "path cover of the graph (Nimble / FULL_GRAPH_PARTITION) folded onto N streams",
    ),
    "embedding": (
        "msopt.rules.embedding",
        "embedding",
        "each feature's embedding lookup on a stream, balanced by cost",
    ),
    "towers": (
        "msopt.rules.towers",
        "towers",
        "replicated towers (tower_k, replica_k, identical branches) one per stream",
    ),
    "stage": ("msopt.rules.stage", "stage", "input/preprocessing subgraph upstream of a boundary on its own stream"),
    "collective": (
        "msopt.rules.collective",
        "collective",
        "communication ops (NCCL, Collective*, Horovod, Send/Recv) on their own stream",
    ),
}


@dataclass(frozen=True)
class ManualOptions:
    """Policy manual: the rules file and whether its rules win over existing _stream_id attributes."""

    rules: str | None = None
    override: bool = False


@dataclass(frozen=True)
class StageOptions:
    """Policy stage: the boundary tensors ('name', 'name:0', 'function:name') and the stage's stream."""

    boundary: tuple[str, ...] = ()
    stream: int | None = None  # default: the last stream


@dataclass(frozen=True)
class CollectiveOptions:
    """Policy collective: the stream of the communication ops."""

    stream: int | None = None  # default: the last stream


@dataclass(frozen=True)
class RuleOptions:
    """What a rule reads: the stream count, per-op times to balance by, and its own options."""

    streams: int
    node_costs: Mapping[str, float] | None = None  # {node key: time}; None: one unit per kernel
    run: Any = None  # the flattened run to plan (msopt.graph.flat.Tasks); None: the run of every main-graph node
    manual: ManualOptions = field(default_factory=ManualOptions)
    stage: StageOptions = field(default_factory=StageOptions)
    collective: CollectiveOptions = field(default_factory=CollectiveOptions)


@dataclass
class RuleResult:
    """A rule's raw plan (before the constraints) and what it says about it."""

    partition: dict[str, int]
    fallback: set[str] = field(default_factory=set)  # nodes placed only by default: constraints may move them freely
    report: dict = field(default_factory=dict)  # entries for the partition report (manual: rules matched)
    notes: list[str] = field(default_factory=list)  # sentences for the user (auto: what it chose)


def policy_help() -> str:
    """The policy list of `msopt partition --help`, one line per policy, from POLICIES."""
    width = max(map(len, POLICIES))
    return "\n".join(f"  {name:<{width}} {description}" for name, (_, _, description) in POLICIES.items())


def check_policy(name: str) -> None:
    if name not in POLICIES:
        raise InputError(f"unknown policy '{name}'; choose one of: {', '.join(POLICIES)}")


def run_rule(name: str, view, options: RuleOptions) -> RuleResult:
    """Run rule ``name`` (any policy but auto, which is a search over the rules)."""
    check_policy(name)
    if name == AUTO:
        raise ValueError("policy auto is a search: run it through msopt.planning.plan")
    module, function, _ = POLICIES[name]
    result = getattr(import_module(module), function)(view, options)
    return result if isinstance(result, RuleResult) else RuleResult(result)
