"""The choice: the measured fastest verified candidate, but a multi-stream plan only when it beats one stream
by more than the measured spread."""

from msopt.errors import CheckFailed
from msopt.tune.candidates import ONE_STREAM


def choose(rows):
    """(label chosen, why) among ``rows`` ({label, verified, measured: {median_ms, spread_ms}, streams_used})."""
    usable = [r for r in rows if r["verified"] and r.get("measured")]
    if not usable:
        if not any(r["verified"] for r in rows):
            raise CheckFailed("no candidate verified: every plan's outputs differ from the original's (see the report)")
        raise CheckFailed("no verified candidate was measured")
    best = min(usable, key=lambda r: (r["measured"]["median_ms"], r["streams_used"]))
    one = next((r for r in usable if r["label"] == ONE_STREAM), None)
    fmt = lambda ms: f"{ms:.4g} ms"  # noqa: E731
    if best["streams_used"] == 1 or one is None:
        if one is None and best["streams_used"] > 1:
            return best["label"], (
                f"{best['label']} measured fastest ({fmt(best['measured']['median_ms'])}); one stream was not "
                "measured, so nothing to beat"
            )
        return best["label"], f"{best['label']} measured fastest ({fmt(best['measured']['median_ms'])} median)"
    gain = one["measured"]["median_ms"] - best["measured"]["median_ms"]
    spread = max(best["measured"]["spread_ms"], one["measured"]["spread_ms"])
    if gain > spread:
        return best["label"], (
            f"{best['label']} measured fastest: {fmt(best['measured']['median_ms'])} vs "
            f"{fmt(one['measured']['median_ms'])} on one stream, faster by {fmt(gain)}, more than the spread {fmt(spread)}"
        )
    return ONE_STREAM, (
        f"kept one stream: the fastest plan, {best['label']} ({fmt(best['measured']['median_ms'])}), beats one stream "
        f"({fmt(one['measured']['median_ms'])}) by {fmt(gain)}, not more than the measured spread {fmt(spread)}"
    )


def choose_lanes(rows, concurrency):
    """(label, why) among the lane rows: the most records/s when ``concurrency`` > 1, else the lowest median latency;
    more than one lane only when it beats one lane by more than the larger of the two spreads."""
    usable = [r for r in rows if r["verified"] and r.get("measured")]
    if not usable:
        return None, "no lane count verified and was measured"
    if concurrency > 1:
        figure = lambda r: r["measured"]["records_per_s"]["median"]  # noqa: E731
        spread = lambda r: r["measured"]["records_per_s"]["spread"]  # noqa: E731
        best = max(usable, key=lambda r: (figure(r), -r["lanes"]))
        unit, gain_of = "records/s", lambda a, b: figure(a) - figure(b)  # noqa: E731
    else:
        figure = lambda r: r["measured"]["median_ms"]  # noqa: E731
        spread = lambda r: r["measured"]["spread_ms"]  # noqa: E731
        best = min(usable, key=lambda r: (figure(r), r["lanes"]))
        unit, gain_of = "ms", lambda a, b: figure(b) - figure(a)  # noqa: E731
    what = "throughput" if concurrency > 1 else "median latency"
    one = next((r for r in usable if r["lanes"] == 1), None)
    if best["lanes"] == 1 or one is None:
        return best["label"], f"best {what} ({figure(best):.4g} {unit})"
    gain, noise = gain_of(best, one), max(spread(best), spread(one))
    if gain > noise:
        return best["label"], (
            f"best {what}, {figure(best):.4g} vs {figure(one):.4g} {unit} on one lane, "
            f"better by {gain:.4g}, more than the spread {noise:.4g}"
        )
    return one["label"], (
        f"kept one lane: {best['label']} ({figure(best):.4g} {unit}) beats one lane ({figure(one):.4g}) by "
        f"{gain:.4g}, not more than the measured spread {noise:.4g}"
    )
