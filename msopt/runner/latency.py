"""The latency figures of a report, from step latencies: one table for a run and for its replicas together."""

import numpy as np


def latency_table(ms):
    """Mean, p50, p95, p99, min and max of the step latencies ``ms`` (milliseconds), rounded as reports give them."""
    ms = np.asarray(ms)
    figures = {
        "mean": ms.mean(),
        "p50": np.percentile(ms, 50),
        "p95": np.percentile(ms, 95),
        "p99": np.percentile(ms, 99),
        "min": ms.min(),
        "max": ms.max(),
    }
    return {k: round(float(v), 4) for k, v in figures.items()}
