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
