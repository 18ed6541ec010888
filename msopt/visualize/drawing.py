"""Drawing a plan: a signature's ops folded by scope, coloured by stream, as a picture (SVG, PNG, PDF, DOT) or an HTML report."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from msopt.errors import InputError, check_interrupted
from msopt.files import output_guard
from msopt.files.output_guard import Output, given
from msopt.files.outputs import write_bytes

FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": "dot", ".gv": "dot", ".html": "html", ".htm": "html"}
INSTALL_DOT = (
    "install graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; "
    "conda: conda install graphviz)"
)


def draw(
    model: str,
    output: str | None = None,
    streams: int | None = None,
    policy: str | None = None,
    rules: str | None = None,
    override: bool = False,
    depth: int = 1,
    expand: Iterable[str] = (),
    signature: str | None = None,
    target: str | None = None,
    batch_size: int = 1,
    costs: str | None = None,
    timeline: str | None = None,
    boundary: Iterable[str] = (),
    tags: str | None = None,
    progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Plan (as `msopt partition` would), simulate when the cost model can, and draw: the `msopt visualize --json` document.

    ``streams`` None: what the model's _stream_id attributes use (policy none), else 4.
    ``warn`` receives a note when the simulation is missing; the document's notes say the rest.
    """
    say = progress or _quiet
    from msopt import visualize as draw
    from msopt.load import open_model
    from msopt.planning.plan import CostOptions, ManualOptions, PlanOptions, StageOptions, make_plan
    from msopt.visualize import report_html

    started = time.perf_counter()
    output, timeline = given("-o", output), given("--timeline", timeline)
    out = Path(output) if output else Path(f"{Path(model.rstrip('/')).stem or 'model'}.svg")
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise InputError(f"{out}: unknown picture format '{out.suffix}'; use one of: {', '.join(sorted(set(FORMATS)))}")
    written = [Output("-o", out, fmt), Output("--timeline", timeline, "json") if timeline else None]
    if fmt != "dot" and shutil.which("dot") is None:  # the picture falls back to its .dot text
        written.append(Output("-o (graphviz text, no dot found)", out.with_suffix(".dot"), "dot"))
    output_guard.check([model, rules, costs], written, force)
    say(f"loading {model}")
    loaded, view = open_model(model, tags)
    ops, edges, sig = draw.signature_ops(loaded, view, signature)
    policy, streams = _policy_and_streams(view, policy, rules, streams)
    options = PlanOptions(
        streams=streams,
        policy=policy,
        cost=CostOptions(target, batch_size, costs, sig),
        manual=ManualOptions(rules, override),
        stage=StageOptions(tuple(boundary)),
    )
    cost_model = _cost_model(view, loaded, options.cost, warn or _quiet)
    say(f"partitioning with policy {policy} on {streams} streams")
    planned = make_plan(view, options, loaded, cost_model)
    plan = planned.partition
    simulation = _simulate(view, plan, streams, cost_model)
    root, op_streams = draw.fold(ops, edges, plan, depth, expand)
    busy = dict(enumerate(simulation.report()["stream_busy_ms"])) if simulation else None
    rows = draw.legend_rows(op_streams, streams, busy)
    share_of = "est. time" if simulation else "share of ops"
    cross = sum(1 for s, d, _ in edges if op_streams[s] != op_streams[d])
    title = (
        f"{Path(model.rstrip('/')).name}: signature {sig or '(whole graph)'}, policy {policy}, {_count(streams, 'stream')}, "
        f"{_count(len(ops), 'op')}, {_count(cross, 'cross-stream edge')}"
    )
    if simulation:
        report = simulation.report()
        title += f", simulated {report['speedup']:.2f}x (bound {report['lower_bound_ms']:.3g} ms)"
    dot_text = draw.to_dot(ops, edges, root, op_streams, rows, title, share_of)
    rule_notes = list(planned.notes)
    written, notes = _write(out, fmt, dot_text, draw, report_html, title, rows, share_of, simulation, rule_notes)
    if timeline:
        _write_timeline(timeline, simulation)
    document = {
        "model": model,
        "signature": sig,
        "policy": policy,
        "streams": streams,
        "output": str(written),
        "format": fmt if written == out else "dot",
        "ops_shown": len(ops),
        "cross_stream_edges": cross,
        "drawn": len(re.findall(r"^\s+[bo]\d+ \[", dot_text, re.M)),
        "legend": rows,
        "simulation": simulation.report() if simulation else None,
        "timeline": timeline,
        "notes": notes,
        "elapsed_s": round(time.perf_counter() - started, 3),
    }
    return document


def _policy_and_streams(view, policy, rules, streams):
    """The model's own _stream_id attributes (policy none) unless a rule or a rules file is asked for."""
    from msopt.planning.plan import resolve_policy

    policy = resolve_policy(policy, rules, default="none")
    if streams is None:
        existing = [n.stream for n in view.real_nodes() if n.stream is not None]
        streams = max(existing) + 1 if policy == "none" and existing else (1 if policy == "none" else 4)
    return policy, streams


def _cost_model(view, loaded, cost, warn):
    from msopt.planning.plan import build_cost_model

    try:
        return build_cost_model(view, loaded, cost)
    except InputError:
        raise  # the user's --target, --batch-size or --costs
    except Exception as e:  # the picture does not need the simulation: say why it is missing
        check_interrupted()
        warn(
            f"note: no simulation ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "the legend shows shares of ops"
        )
        return None


def _simulate(view, plan, streams, cost_model):
    if cost_model is None:
        return None
    from msopt.simulator.simulate import simulate

    return simulate(view, plan, streams, cost_model)


def _write(out, fmt, dot_text, draw, report_html, title, rows, share_of, simulation, rule_notes):
    """Write the picture or report; returns (path written, notes for the user)."""
    notes = list(rule_notes)
    if fmt == "dot":
        _write_text(out, dot_text)
        return out, notes
    try:
        if fmt != "html":
            draw.render(dot_text, fmt, str(out))
            return out, notes
        svg = draw.render(dot_text, "svg")
    except draw.DotMissing:
        dot_path = out.with_suffix(".dot")
        _write_text(dot_path, dot_text)
        notes.append(
            f"graphviz 'dot' not found: wrote {dot_path}; {INSTALL_DOT}, "
            f"then: dot -Tsvg {dot_path} -o {out.with_suffix('.svg')}"
        )
        if fmt != "html":
            return dot_path, notes
        svg = None
    events = simulation.events() if simulation else None
    waits = simulation.waits if simulation else None
    _write_text(
        out,
        report_html.build(
            title, svg, rows, share_of, simulation.report() if simulation else None, events, waits, notes=rule_notes
        ),
    )
    return out, notes


def _write_timeline(path, simulation):
    if simulation is None:
        raise InputError("--timeline needs the simulator, which could not model this model (see the note above)")
    try:
        from msopt.simulator.timeline import chrome_trace
    except ImportError:
        raise InputError("--timeline needs msopt.simulator.timeline, which this installation lacks") from None
    write_json(path, chrome_trace(simulation))


def _count(n, noun):
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _write_text(path, text):
    write_bytes(path, text.encode("utf-8"))


def _quiet(message):
    pass


def write_json(path, document):
    """Write a JSON file whole (replacing it in one step)."""
    write_bytes(path, json.dumps(document, indent=2, default=str).encode())
