"""Measuring candidates for real: warm-up, then interleaved rounds (A B C A B C ...), stopped by the budget or Ctrl-C
at a round boundary; the median step time and its spread per candidate."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

import numpy as np

from msopt.errors import interrupted, rearm


@dataclass
class Rounds:
    """What the rounds measured: per label, the step times (seconds) of every complete round."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    rounds: int = 0
    stopped: str = "done"  # "done", "budget" or "interrupted"
    seconds: float = 0.0


def warm_up(steps, count):
    """Run each candidate's step ``count`` times; returns {label: seconds per step} (the last run's time)."""
    per_step = {}
    for label, step in steps.items():
        took = 0.0
        for _ in range(count):
            t = time.perf_counter()
            step()
            took = time.perf_counter() - t
        per_step[label] = took
    return per_step


def run_rounds(steps, rounds, per_round, deadline=None, tick=None):
    """Interleaved rounds over ``steps`` ({label: callable}): each round runs every candidate ``per_round`` times,
    in turn. Before a round starts, it must fit before ``deadline`` (time.perf_counter() seconds), judged by
    the longest round so far; Ctrl-C ends the rounds too (another signal ends the tune). Only complete rounds
    count."""
    result = Rounds({label: [] for label in steps})
    clock = time.perf_counter
    started = clock()
    longest = 0.0
    try:
        for _ in range(rounds):
            if deadline is not None and result.rounds and clock() + longest > deadline:
                result.stopped = "budget"
                break
            begun = clock()
            this_round = {}
            for label, step in steps.items():
                times = []
                for _ in range(per_round):
                    t = clock()
                    step()
                    times.append(clock() - t)
                this_round[label] = times
                if tick is not None:
                    tick()
            for label, times in this_round.items():
                result.samples[label].extend(times)
            result.rounds += 1
            longest = max(longest, clock() - begun)
    except KeyboardInterrupt as stop:
        if getattr(stop, "signum", signal.SIGINT) != signal.SIGINT:
            raise  # SIGTERM (SIGHUP) ends the tune at once: only Ctrl-C keeps what was measured
        result.stopped = "interrupted"
    except Exception:
        if interrupted() != signal.SIGINT:
            raise
        result.stopped = "interrupted"  # Ctrl-C that TensorFlow turned into an error of its own (a ValueError)
    if result.stopped == "interrupted":
        rearm()  # handled: another Ctrl-C (while the outputs are written, say) stops the tune
    result.seconds = clock() - started
    return result


def summary(times):
    """{median_ms, spread_ms, p25_ms, p75_ms, steps}: spread is the interquartile range of the step times."""
    if not times:
        return None
    ms = np.asarray(times) * 1e3
    p25, p50, p75 = np.percentile(ms, [25, 50, 75])
    return {
        "median_ms": round(float(p50), 4),
        "spread_ms": round(float(p75 - p25), 4),
        "p25_ms": round(float(p25), 4),
        "p75_ms": round(float(p75), 4),
        "steps": len(times),
    }
