"""The tune report: per candidate simulated and measured times, their ratio and verification; the choice and why."""

CPU_NOTE = (
    "CPU figures: measured on logical CPU devices, which share the host's cores; they do not predict "
    "the times or the best plan on a GPU"
)
SIMULATED_NOTE = (
    "simulated: msopt's GPU simulator on target {target} at batch {batch}, its per-op times replaced by the "
    "measured profile (launch, sync and copy costs stay the target's constants)"
)


def candidate_row(candidate, verified, max_abs_diff, measured, error=None):
    """One candidate's entry: simulated and measured ms, their ratio (measured / simulated), verified or why not."""
    simulated_ms = round(candidate.simulated_us / 1000, 6)
    row = {
        "label": candidate.label,
        "kind": candidate.kind,
        "streams": candidate.streams,
        "streams_used": candidate.streams_used,
        "simulated_ms": simulated_ms,
        "measured": measured,
        "measured_over_simulated": round(measured["median_ms"] / simulated_ms, 4)
        if measured and simulated_ms > 0
        else None,
        "verified": verified,
        "max_abs_diff": max_abs_diff,
    }
    if not verified:
        row["discarded"] = error or f"outputs differ from the original's (max abs diff {max_abs_diff:g})"
    return row


def document(config, device_type, devices, signature, profile, cost_model, rows, skipped, rounds, chosen, why):
    doc = {
        "model": config.model,
        "output": None,
        "costs": None,
        "signature": signature,
        "device": {"type": device_type, "devices": devices},
        "streams": config.streams,
        "batch_size": config.batch_size,
        "records": config.records,
        "profile": profile,
        "simulated": SIMULATED_NOTE.format(target=cost_model.target.name, batch=cost_model.batch_size),
        "candidates": rows,
        "not_measured": skipped,
        "rounds": {
            "done": rounds.rounds if rounds else 0,
            "asked": config.rounds,
            "steps_per_round": config.steps,
            "warmup": config.warmup,
            "stopped": rounds.stopped if rounds else "budget",
            "seconds": round(rounds.seconds, 3) if rounds else 0.0,
        },
        "budget_s": config.budget,
        "chosen": chosen,
        "why": why,
    }
    if device_type == "cpu":
        doc["device"]["note"] = CPU_NOTE
    return doc


def text(doc):
    """The report for a person: one line per candidate, then the choice."""
    device = doc["device"]
    lines = [
        f"{doc['model']}: tuned on {len(device['devices'])} {device['type'].upper()} device(s), "
        f"signature {doc['signature']}, batch {doc['batch_size']}, {doc['rounds']['done']} round(s) "
        f"of {doc['rounds']['steps_per_round']} steps per candidate"
        + (f" (stopped: {doc['rounds']['stopped']})" if doc["rounds"]["stopped"] != "done" else "")
    ]
    if device.get("note"):
        lines.append(f"  {device['note']}")
    lines.append(f"  {'candidate':<36} {'simulated ms':>12} {'measured ms':>12} {'spread':>8} {'ratio':>7}  verified")
    for row in doc["candidates"]:
        m = row["measured"]
        lines.append(
            f"  {row['label'][:36]:<36} {row['simulated_ms']:>12.4g} "
            f"{(format(m['median_ms'], '.4g') if m else '-'):>12} {(format(m['spread_ms'], '.3g') if m else '-'):>8} "
            f"{(format(row['measured_over_simulated'], '.3g') if row['measured_over_simulated'] else '-'):>7}  "
            f"{'yes' if row['verified'] else 'NO: ' + row['discarded']}"
        )
        for difference in row.get("differences", [])[:1]:
            lines.append(f"      {difference['node'] + ': ' if difference['node'] else ''}{difference['why']}")
    lanes = doc.get("lanes")
    if lanes:
        lines.append(f"  lanes of {lanes['plan']} ({lanes['figure']} is the figure):")
        for row in lanes["candidates"]:
            m = row["measured"]
            figure = (
                f"{m['records_per_s']['median']:.5g} records/s (spread {m['records_per_s']['spread']:.3g}), "
                if m
                else ""
            )
            latency = f"median {m['median_ms']:.4g} ms" if m else "not measured"
            lines.append(
                f"    {row['label']:<34} {figure}{latency}  {'verified' if row['verified'] else 'NO: ' + row['discarded']}"
            )
        lines.append(f"    chosen: {lanes['chosen']}: {lanes['why']}")
    fit = doc.get("host_fit")
    if fit:
        values = ", ".join(f"{k} {v:g}" for k, v in fit["fitted"].items())
        lines.append(
            f"  host model fitted to {fit['points']} measured plan(s): {values} (launch_threads {fit['launch_threads']});"
            f" residual {fit['residual_rms_log']:g} (rms log); simulator error {fit['error_before']:.1%} before, "
            f"{fit['error_after']:.1%} after"
        )
    if doc["not_measured"]:
        lines.append(f"  not measured: {len(doc['not_measured'])} plan(s) (see not_measured in --json)")
    lines.append(f"  chosen: {doc['chosen']}: {doc['why']}")
    if doc["output"]:
        lines.append(f"  wrote {doc['output']}, costs {doc['costs']}, report {doc.get('report')}")
        if doc.get("host_profile"):
            lines.append(f"  host profile {doc['host_profile']} (msopt simulate/partition --host-profile)")
        lines.append(f"  deploy with {doc['deploy']['session_config']}, or: {doc['deploy']['run']}")
        if doc["deploy"].get("lanes"):
            lines.append(f"  under concurrent requests: {doc['deploy']['lanes']}")
    else:
        lines.append("  wrote nothing")
    lines.append(f"  ratio = measured / simulated; {doc['simulated']}")
    lines.append(f"  tune took {doc.get('elapsed_s')} s")
    return "\n".join(lines)
