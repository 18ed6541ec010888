"""One ``msopt tune``: profile the one-stream model, plan candidates from the profile, load each placed on the
present device, verify each against the original, measure them in interleaved rounds, choose, write."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import time
from pathlib import Path

from msopt.errors import CheckFailed, InputError, check_interrupted, exit_held, held
from msopt.files import output_guard
from msopt.files.output_guard import Output

PROFILE_STEPS = 3  # fully traced steps behind the costs file


def tune(config, progress=lambda message: None, bar=None):
    """Run ``config`` (a msopt.tune.config.TuneConfig); returns the report. ``bar(length)``, when given, returns a
    progress bar (a context manager with ``update(n)``) for the measuring rounds, or None."""
    from msopt.load import open_model

    started = time.perf_counter()
    config.check()
    for option, value in (("-o", config.output), ("--costs-output", config.costs_output), ("--report", config.report)):
        output_guard.given(option, value)  # made absolute, an empty path would name the current folder
    config = config.with_absolute_paths()  # each runner works in a directory of its own
    deadline = started + config.budget if config.budget is not None else None
    for path in config.rules:
        if not os.path.isfile(path):
            raise InputError(f"{path}: rules file not found")
    written = [Output("-o", config.output, "model"), Output("--costs-output", config.costs_path, "json")]
    written += [
        Output("--report", config.report_path, "json"),
        Output("-o (host profile)", config.host_profile_path, "json"),
    ]
    output_guard.check([config.model, *config.rules], written, config.force)  # before any work
    model, view = open_model(config.model, config.tags)
    os.environ.setdefault("TF_CUDNN_USE_AUTOTUNE", "0")  # a bitwise check on a GPU needs fixed cuDNN algorithms
    with exit_held(contextlib.ExitStack()) as stack:  # a signal while the runners close waits for the end
        with held():  # a signal between the two must not leave the folder behind
            work = Path(tempfile.mkdtemp(prefix="msopt-tune-"))
            stack.callback(shutil.rmtree, work, ignore_errors=True)  # pushed first: removed after every runner closed
        doc = _tune(config, model, view, work, stack, started, deadline, progress, bar)
    doc["elapsed_s"] = round(time.perf_counter() - started, 3)
    return doc


def _tune(config, model, view, work, stack, started, deadline, progress, bar):
    from msopt.graph.contents import signatures
    from msopt.planning.plan import CostOptions
    from msopt.runner.feeds import choose_signature, make_records
    from msopt.runner.tensorflow_runtime import import_tensorflow
    from msopt.tune import report as reporting
    from msopt.tune.candidates import ONE_STREAM, Candidate, plan_candidates
    from msopt.tune.choose import choose
    from msopt.tune.measure import run_rounds, summary, warm_up
    from msopt.tune.profile import profile
    from msopt.tune.write import write_outputs

    progress("loading TensorFlow")
    import_tensorflow()
    one = Candidate(ONE_STREAM, ONE_STREAM, 1)
    progress("profiling the one-stream model")
    base = _load(model, one, config, work / "one_stream", stack)
    signature = choose_signature(base.specs, config.signature)
    feeds = make_records(base.specs[signature]["inputs"], config.batch_size, config.records, config.seed, None, view)
    if base.device_type == "gpu":
        from msopt.runner.devices import bitwise_gpu_numerics

        bitwise_gpu_numerics(base.tf)  # the comparison below must be bitwise: TF32 off, deterministic ops
    original = base.load_other(model)
    stack.callback(original.close)
    expected = [_run_or_bad_input(original, signature, f, model.path) for f in feeds]
    profiled, costs = profile(base, signature, feeds[0], PROFILE_STEPS, work / "costs.json")
    _check_budget(config, started, deadline, "profiling the model")
    progress("planning candidates from the measured costs")
    declared = signatures(model)  # a bare graph has none: the runner names its one signature "graph"
    cost = CostOptions(config.target, config.batch_size, str(work / "costs.json"), signature if declared else None)
    candidates, skipped, cost_model = plan_candidates(
        view, model, config.streams, cost, config.rules, config.max_candidates
    )
    rows, steps, runners = [], {}, {}
    for i, candidate in enumerate(candidates):
        progress(f"loading and verifying {candidate.label}")
        try:
            runner = base if i == 0 else _load(model, candidate, config, work / f"candidate_{i}", stack)
            got = [runner.executable.step(signature, f)() for f in feeds]
        except Exception as e:  # a candidate TensorFlow refuses is discarded, not the whole tune
            check_interrupted()  # unless the error is an interrupt in disguise
            from msopt.runner.tensorflow_runtime import error_line

            if not (isinstance(e, InputError) or type(e).__module__.startswith("tensorflow")):
                raise
            rows.append(
                reporting.candidate_row(candidate, False, None, None, f"TensorFlow cannot run it: {error_line(e)}")
            )
            continue
        runners[candidate.label] = runner
        identical, worst = _compare(expected, got)
        rows.append(reporting.candidate_row(candidate, identical, worst, None))
        if not identical and base.device_type == "cpu":  # why: what TensorFlow rewrote in one model only
            from msopt.runner.verify import executed_differences

            rows[-1]["differences"] = executed_differences(
                original, runner.executable, signature, feeds[0], config.streams
            )
        if identical:
            steps[candidate.label] = _cycling([runner.executable.step(signature, f) for f in feeds])
    by_label = {c.label: c for c in candidates}
    rounds = None
    if steps:
        progress(f"warming up {len(steps)} verified candidate(s)")
        per_step = warm_up(steps, max(config.warmup, 1))
        one_round = sum(per_step.values()) * config.steps
        _check_budget(config, started, deadline, "profiling, planning, loading and verifying", one_round)
        with _bar(bar, config.rounds * len(steps)) as progress_bar:
            tick = (lambda: progress_bar.update(1)) if progress_bar is not None else None
            rounds = run_rounds(steps, config.rounds, config.steps, _half_way(deadline, config), tick)
        if rounds.stopped == "interrupted" and rounds.rounds == 0:
            raise KeyboardInterrupt
        for row in rows:
            if row["label"] in steps:
                row["measured"] = summary(rounds.samples[row["label"]])
                if row["measured"] and row["simulated_ms"] > 0:
                    row["measured_over_simulated"] = round(row["measured"]["median_ms"] / row["simulated_ms"], 4)
    devices = [base.layout.device_name(k) if base.layout else f"/device:CPU:{k}" for k in range(config.streams)]
    doc = reporting.document(
        config,
        base.device_type,
        devices,
        signature,
        {**profiled, "path": None},
        cost_model,
        rows,
        skipped,
        rounds,
        None,
        None,
    )
    try:
        doc["chosen"], doc["why"] = choose(rows)
    except CheckFailed as e:
        doc["why"] = str(e)
        e.document = doc  # the command prints the report: which candidates differed, and by how much
        raise
    if rounds.stopped == "budget":
        doc["why"] += f"; --budget {config.budget:g} s stopped the rounds after {rounds.rounds}"
    elif rounds.stopped == "interrupted":
        doc["why"] += f"; Ctrl-C stopped the rounds after {rounds.rounds}"
    chosen = by_label[doc["chosen"]]
    needed = max(chosen.partition.values(), default=0) + 1
    doc["deploy"] = {
        "streams": needed,
        "session_config": f"msopt.stream.session_config({needed}, device_type={base.device_type!r})",
        "run": f"msopt run {config.output} --streams {needed}",
    }
    if config.lane_count:
        _tune_lanes(
            config,
            chosen,
            needed,
            runners[chosen.label],
            signature,
            feeds,
            expected,
            deadline,
            stack,
            doc,
            progress,
            bar,
        )
    doc["elapsed_s"] = round(time.perf_counter() - started, 3)
    placement = base.layout if base.device_type == "gpu" and base.layout is not None else base.device_type
    profile_doc = _fit(view, cost_model, candidates, rows, base.device_type, doc, progress)
    progress(f"writing {config.output}")
    with held():  # SIGTERM too waits until every output is in place (Ctrl-C is held by write_outputs itself)
        write_outputs(model, chosen, config, placement, costs, doc, profile_doc)
    return doc


def _half_way(deadline, config):
    """The plans' rounds end half way to the deadline when lane candidates are measured after them."""
    if deadline is None or not config.lane_count:
        return deadline
    now = time.perf_counter()
    return now + (deadline - now) / 2


def _tune_lanes(config, chosen, streams, runner, signature, feeds, expected, deadline, stack, doc, progress, bar):
    """The chosen plan on 1..K lanes under C threads: doc["lanes"] (rows, choice, why) and the deploy line."""
    from msopt.graph.view import GraphView
    from msopt.lanes.tune import measure_lanes
    from msopt.load import load
    from msopt.runner.feeds import batch_of
    from msopt.tune.choose import choose_lanes

    model = load(str(runner.candidate_path), config.tags)
    batch = batch_of(feeds[0], config.batch_size)
    with _bar(bar, config.rounds * config.lane_count) as progress_bar:
        tick = (lambda: progress_bar.update(1)) if progress_bar is not None else None
        rows, rounds = measure_lanes(
            config, model, GraphView(model.graph_def), streams, signature, feeds, expected, batch, deadline, stack,
            progress, tick,
        )  # fmt: skip
    label, why = choose_lanes(rows, config.concurrency)
    doc["lanes"] = {
        "plan": chosen.label,
        "concurrency": config.concurrency,
        "figure": "records_per_s" if config.concurrency > 1 else "median_ms",
        "candidates": rows,
        "rounds": {"done": rounds.rounds, "stopped": rounds.stopped} if rounds else {"done": 0, "stopped": None},
        "chosen": label,
        "why": why,
    }
    if label is not None:
        k = next(r["lanes"] for r in rows if r["label"] == label)
        doc["deploy"]["lanes"] = (
            f"msopt run {config.output} --streams {streams} --lanes {k} --concurrency {config.concurrency}"
        )
    if rounds is not None and rounds.stopped == "interrupted":
        doc["rounds"]["stopped"] = "interrupted"
        doc["why"] += f"; Ctrl-C stopped the lane rounds after {rounds.rounds}"


def _fit(view, cost_model, candidates, rows, device_type, doc, progress):
    """The host model fitted to the measured plans (doc["host_fit"]); returns the host profile to write, or None."""
    from msopt.tune.fit import fit_host, host_profile

    by_label = {c.label: c for c in candidates}
    points = [
        (by_label[r["label"]], r["measured"]["median_ms"])
        for r in rows
        if r["verified"] and r.get("measured") and r["label"] in by_label and r["measured"]["median_ms"] > 0
    ]
    if not points:
        doc["host_fit"] = None
        return None
    progress(f"fitting the host model to {len(points)} measured plan(s)")
    doc["host_fit"] = fit_host(view, cost_model, points)
    return host_profile(doc["host_fit"], device_type)


def _load(model, candidate, config, folder, stack):
    """The candidate's model written with its stream ids and loaded by the runner on ``config.streams`` devices
    (every candidate gets the same devices, so TensorFlow's context is configured once)."""
    from msopt import emit
    from msopt.graph.view import GraphView
    from msopt.load import load
    from msopt.runner.placed_model import Runner

    folder.mkdir()
    path = emit.write(model, candidate.partition, folder / Path(model.path).name, const_copies=candidate.const_copies)
    written = load(path, config.tags)
    runner = Runner(written, GraphView(written.graph_def), config.devices, config.device)
    runner.candidate_path = path  # the lanes of the chosen plan load it again
    stack.callback(runner.close)  # closed in reverse order: each runner restores the directory it found
    return runner


def _run_or_bad_input(executable, signature, feeds, path):
    from msopt.runner.tensorflow_runtime import error_line

    try:
        return executable.run(signature, feeds)
    except Exception as e:
        if type(e).__module__.startswith("tensorflow"):
            raise InputError(f"{path}: TensorFlow cannot run signature '{signature}': {error_line(e)}") from None
        raise


def _compare(expected, got):
    from msopt.runner.verify import compare_outputs

    identical, worst = True, 0.0
    for want, have in zip(expected, got):
        same, diff = compare_outputs(want, have)
        identical &= same
        worst = max(worst, diff)
    return identical, worst


def _cycling(steps):
    """One callable running the records' steps in turn."""
    turn = itertools.cycle(steps)
    return lambda: next(turn)()


def _check_budget(config, started, deadline, what, next_round=0.0):
    if deadline is None:
        return
    now = time.perf_counter()
    if now + next_round > deadline:
        raise InputError(
            f"--budget {config.budget:g} s is too small for one measuring round: {what} took "
            f"{now - started:.1f} s"
            + (f" and one round needs about {next_round:.2g} s more" if next_round else "")
            + "; nothing written (raise --budget, or lower --steps or --max-candidates)"
        )


@contextlib.contextmanager
def _bar(factory, length):
    made = factory(length) if factory is not None else None
    if made is None:
        yield None
        return
    with made as progress_bar:
        yield progress_bar
