"""The Python API: `inspect`, `partition` and `simulate` return the documents the commands print with --json.

Bad input raises msopt.InputError, a failed verification msopt.VerifyFailed (a CheckFailed
carrying the report); nothing here exits or prints. TensorFlow is imported only by
``partition(..., verify=True)``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

from msopt.errors import InputError, VerifyFailed
from msopt.files import output_guard
from msopt.files.output_guard import Output, given
from msopt.planning.plan import (
    CostOptions,
    HostOptions,
    ManualOptions,
    PlanOptions,
    StageOptions,
    build_cost_model,
    make_plan,
    resolve_policy,
)

PathLike = Union[str, "os.PathLike[str]"]
Progress = Optional[Callable[[str], None]]

__all__ = ["inspect", "partition", "simulate"]
MAX_WARNINGS = 10  # unmatched rules warned about one by one; the rest are counted


def inspect(model: PathLike, tags: str | None = None) -> dict[str, Any]:
    """What a model holds (format, tag sets, signatures, sizes, op types, streams, devices): `msopt inspect --json`."""
    from msopt.graph.contents import describe
    from msopt.load import open_model

    loaded, view = open_model(os.fspath(model), tags)
    return describe(loaded, view)


def partition(
    model: PathLike,
    streams: int = 4,
    policy: str | None = None,
    output: PathLike | None = None,
    *,
    placement: str = "attr",
    device_type: str = "gpu",
    force: bool = False,
    verify: bool = False,
    inputs: PathLike | None = None,
    tolerance: float | None = None,
    target: str | None = None,
    batch_size: int = 1,
    costs: PathLike | None = None,
    host_profile: PathLike | None = None,
    merge_copy_streams: bool = False,
    rules: PathLike | None = None,
    override: bool = False,
    const_dup: bool = True,
    boundary: Iterable[str] = (),
    tags: str | None = None,
    report: PathLike | None = None,
    progress: Progress = None,
    warn: Progress = None,
) -> dict[str, Any]:
    """Assign every op of ``model`` to one of ``streams`` streams and write the rewritten model: `msopt partition --json`.

    ``output`` defaults to ``<model>_ms<streams>`` beside the model. With ``verify`` the rewrite reaches
    ``output`` only once its outputs are bitwise identical to the original's; otherwise VerifyFailed
    is raised (its ``document`` says "output": null) and nothing is written. ``inputs`` (an .npz, one
    array per signature input) replaces the generated inputs of the verification; ``tolerance``
    accepts outputs that differ by at most that much (the report says they are not bitwise equal).
    ``warn`` receives a warning per rule of ``rules`` that matched no node, as soon as the plan is made.
    ``host_profile`` (JSON) replaces the host model's constants with measured ones; ``merge_copy_streams``
    simulates copies on the compute streams. The simulated figures carry their ranges over the host
    assumptions (``speedup_range``, ``makespan_ms_range``) and ``robust``.
    """
    from msopt import emit
    from msopt.load import open_model
    from msopt.planning.partition import summarize

    say = progress or _quiet
    started = time.perf_counter()
    model, rules = os.fspath(model), _path(rules)
    policy = resolve_policy(policy, rules)
    _check_choice("placement", placement, ("attr", "device"))
    _check_choice("device_type", device_type, ("gpu", "cpu"))
    if not 1 <= streams <= 1024:
        raise InputError(f"streams must be in [1, 1024], got {streams}")
    if tolerance is not None and not verify:
        raise InputError("--tolerance is read by --verify")
    if tolerance is not None and tolerance < 0:
        raise InputError(f"--tolerance must be at least 0, got {tolerance}")
    inputs = _path(inputs)
    out = given("-o", output) or str(emit.default_output(model, streams))
    report = given("--report", report)
    written_paths = [Output("-o", out, "model"), Output("--report", report, "json") if report else None]
    output_guard.check([model, inputs, costs, host_profile, rules], written_paths, force)
    say(f"loading {model}")
    loaded, view = open_model(model, tags)
    if inputs:
        from msopt.files.inputs import read_signature_inputs

        if not verify:
            raise InputError("--inputs feeds --verify: add --verify")
        read_signature_inputs(loaded, inputs)  # a bad file fails before anything is written
    say(f"partitioning {len(view.nodes)} nodes with policy {policy}")
    options = PlanOptions(
        streams=streams,
        policy=policy,
        cost=CostOptions(target, batch_size, _path(costs), host=HostOptions(_path(host_profile), merge_copy_streams)),
        manual=ManualOptions(rules, override),
        stage=StageOptions(tuple(boundary)),
        const_dup=const_dup,
    )
    cost_model = build_cost_model(view, loaded, options.cost)
    result = make_plan(view, options, loaded, cost_model)
    for line in unmatched_warnings(result.report.get("unmatched_rules", []), rules):
        (warn or _quiet)(line)
    verified: dict[str, Any] = {}

    def check(built):  # with verify: the rewrite reaches the output only once verified
        from msopt.load import load
        from msopt.runner.verify import verify as run_verify

        verified["elapsed_s"] = round(time.perf_counter() - started, 3)
        say("verifying in TensorFlow")
        outcome = verified["verify"] = run_verify(
            loaded,
            load(built, tags),
            streams,
            device_type,
            inputs_npz=inputs and os.path.abspath(inputs),
            tolerance=tolerance,
        )
        if outcome.get("error"):
            outcome["error"] = outcome["error"].replace(str(built), out)
        return outcome["ok"]

    say(f"writing {out}")
    written = emit.write(
        loaded,
        result.partition,
        out,
        placement,
        device_type,
        force,
        const_copies=result.const_copies,
        check=check if verify else None,
        view=view,
    )
    document = {
        "model": model,
        "policy": policy,
        **summarize(view, result.partition, streams),
        "placement": placement,
        "constraint_merges": result.merges,
        "const_copies": result.const_copies,
        **result.report,
        "output": written and out,
        "elapsed_s": verified.pop("elapsed_s", round(time.perf_counter() - started, 3)),
    }
    sim_cost, sim_plan, simulated = _as_written(view, result, cost_model, loaded, written)
    document["simulated"] = simulated_figures(view, sim_plan, streams, sim_cost, simulated)
    document.update(verified)
    if report:
        _write_json(report, document)
    if verify and not document["verify"]["ok"]:
        outcome = document["verify"]
        why = next(
            (f"; {d['node']}: {d['why']}" if d["node"] else f"; {d['why']}" for d in outcome.get("differences", [])), ""
        )
        limit = f", more than --tolerance {tolerance:g}" if tolerance is not None else ""
        cause = outcome.get("error") or (
            f"rewritten model differs from the original (max abs diff {outcome['max_abs_diff']:g}{limit}){why}"
        )
        raise VerifyFailed(f"{cause}; nothing written to {out}", document)
    return document


def simulate(
    model: PathLike,
    streams: int = 4,
    policy: str | None = None,
    *,
    target: str | None = None,
    batch_size: int = 1,
    costs: PathLike | None = None,
    launch_threads: int | None = None,
    host_profile: PathLike | None = None,
    merge_copy_streams: bool = False,
    signature: str | None = None,
    boundary: Iterable[str] = (),
    rules: PathLike | None = None,
    override: bool = False,
    timeline: PathLike | None = None,
    tags: str | None = None,
    progress: Progress = None,
    concurrency: int | None = None,
    lanes: int | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Plan as `partition` would, then simulate one run on a GPU: `msopt simulate --json`. Writes no model.

    The figures carry their ranges over the host assumptions (``speedup_range``, ``makespan_ms_range``) and
    ``robust`` (at least as fast as one stream under every one); ``host_profile`` and ``merge_copy_streams``
    as for `partition`. With ``concurrency`` (or ``lanes``), ``document["load"]`` also simulates that many
    requests in flight over 1..``lanes`` lanes of the plan's streams (msopt.simulator.concurrency.report).
    """
    from msopt.load import open_model
    from msopt.simulator.simulate import simulate as run_simulation

    say = progress or _quiet
    started = time.perf_counter()
    for name, value in (("--concurrency", concurrency), ("--lanes", lanes)):
        if value is not None and value < 1:
            raise InputError(f"{name} must be at least 1, got {value}")
    model, rules = os.fspath(model), _path(rules)
    policy = resolve_policy(policy, rules)
    timeline = given("--timeline", timeline)
    output_guard.check(
        [model, costs, host_profile, rules], [Output("--timeline", timeline, "json") if timeline else None], force
    )
    say(f"loading {model}")
    loaded, view = open_model(model, tags)
    options = PlanOptions(
        streams=streams,
        policy=policy,
        manual=ManualOptions(rules, override),
        stage=StageOptions(tuple(boundary)),
        cost=CostOptions(
            target,
            batch_size,
            _path(costs),
            signature,
            launch_threads,
            HostOptions(_path(host_profile), merge_copy_streams),
        ),
    )
    cost_model = build_cost_model(view, loaded, options.cost)
    say(f"partitioning with policy {policy}")
    planned = make_plan(view, options, loaded, cost_model)
    say(f"simulating {len(cost_model)} ops")
    result = run_simulation(view, planned.partition, streams, cost_model)
    document = {
        "model": model,
        "policy": policy,
        **simulated_figures(view, planned.partition, streams, cost_model, result),
        "constraint_merges": len(planned.merges),
        "notes": planned.notes,
        "elapsed_s": round(time.perf_counter() - started, 3),
    }
    if concurrency is not None or lanes is not None:
        from msopt.simulator.concurrency import report as load_report

        document["load"] = load_report(cost_model, planned.partition, streams, concurrency or 1, lanes or 1, say)
        document["elapsed_s"] = round(time.perf_counter() - started, 3)
    if timeline:
        from msopt.simulator.timeline import chrome_trace

        _write_json(timeline, chrome_trace(result))
        document["timeline"] = timeline
    return document


def _as_written(view, result, cost_model, loaded, written):
    """(cost model, partition, simulate.Result) to report: the written model's run when constants were moved or
    copied into streams (each stream then handles its own copy, which the host model times; msopt.planning.written_run),
    else the plan's."""
    from msopt.planning.written_run import simulated_as_written
    from msopt.simulator.simulate import simulate

    if written and result.written is not None:  # the plan simulated it, weighing Const moves against copies
        return result.written
    if written and result.const_copies:
        return simulated_as_written(view, loaded, cost_model, result.partition, result.const_copies, result.streams)
    return cost_model, result.partition, simulate(view, result.partition, result.streams, cost_model)


def simulated_figures(view, partition, streams, cost_model, result) -> dict[str, Any]:
    """The simulation report of a plan (``result``, its simulate.Result) with its ranges over the host assumptions
    and ``robust``."""
    from msopt.simulator.uncertainty import ranges

    return {**result.report(), **ranges(view, partition, streams, cost_model, result)}


def unmatched_warnings(unmatched: list[dict], rules: str | None) -> list[str]:
    """One warning per rule that matched no node, at most MAX_WARNINGS, then how many more."""
    lines = [f"rule {row['rule']} ({rules}:{row['line']}) matched no node" for row in unmatched[:MAX_WARNINGS]]
    if len(unmatched) > MAX_WARNINGS:
        lines.append(f"... and {len(unmatched) - MAX_WARNINGS} more rules that matched no node")
    return lines


def _quiet(message: str) -> None:
    pass


def _path(value: PathLike | None) -> str | None:
    return None if value is None else os.fspath(value)


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _write_json(path: str, document: dict[str, Any]) -> None:
    """Write a JSON file whole (replacing it in one step)."""
    from msopt.files.outputs import write_bytes

    write_bytes(path, json.dumps(document, indent=2, default=str).encode())
