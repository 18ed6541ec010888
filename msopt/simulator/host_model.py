"""The host model's constants: TensorFlow's launch path per stream, their sources, plausible ranges and host profiles.

TensorFlow runs one executor per device partition, so one per stream (each stream is a virtual
GPU). An executor runs a GPU op inline on the thread that made it ready: per op it pays its
bookkeeping (``op_overhead_us``), then, for a kernel, the CUDA driver's launch call
(``launch_us``). Executors share the inter-op pool (``launch_threads`` threads). Launches into one
CUDA context may serialize in the driver: a launch holds a context-wide resource for
``launch_contention × launch_us`` and runs the rest on its own thread (0: independent threads,
1: one launch at a time across every thread). A run starts its executors one after another,
``partition_overhead_us`` apart (rendezvous, per-partition function state). Copies between streams run on the producing
stream's device-to-device copy stream (``copy_streams`` of them), or on its compute stream when
``merge_copy_streams`` is set (TensorFlow's ``GPUOptions.Experimental.stream_merge_options``).

Every value below has its source or is marked an assumption. ``RANGES`` holds the plausible range
of the uncertain ones, derived in docs/reference.md; ``BOX`` groups them into the three
dimensions whose corners the simulator evaluates. ``load_host_profile`` reads a JSON file of
figures a user measured, which replace the defaults (and, unless a range is given, pin them).
"""

import math
from dataclasses import dataclass

from msopt.errors import InputError
from msopt.files.reading import MAX_HOST_PROFILE_BYTES, read_json

# Point values shared by every target; launch_threads differs per target (below).
DEFAULTS = {
    "op_overhead_us": 1.2,
    "partition_overhead_us": 50.0,
    "launch_us": 3.0,
    "launch_contention": 0.25,
    "sync_us": 10.0,
    "copy_latency_us": 5.0,
    "copy_streams": 1,
    "merge_copy_streams": False,
}

SOURCES = {
    "op_overhead_us": "measured: TensorFlow 2.21 executor, cheap inline ops on logical CPU devices, wall time per "
    "extra op, 0.6-1.6 us on a quiet machine (CPU figure; docs/host.md)",
    "partition_overhead_us": "TensorFlow 2.21 step time grows 0.1-0.2 ms per extra device partition on 2 shared "
    "cores (CPU figure, docs/host.md; the range's high end); assumption: a data-centre host 3x faster",
    "launch_us": "NVIDIA, Getting Started with CUDA Graphs (2019): 3.8 us per kernel when launches are back to back",
    "launch_contention": "assumption inside the range the published figures allow (docs/reference.md)",
    "launch_threads": "TensorFlow's inter-op pool defaults to the host's logical CPUs; DGX system data sheets",
    "sync_us": "TensorFlow's GPU event manager polls completed events every 10 us (polling_active_delay_usecs)",
    "copy_latency_us": "assumption: one cudaMemcpyAsync, of the order of a launch",
    "copy_streams": "TensorFlow's GPUOptions.Experimental.num_dev_to_dev_copy_streams default (1)",
    "merge_copy_streams": "TensorFlow's default (stream_merge_options off)",
}

# Inter-op pool size: logical CPUs of the GPU's reference system (TensorFlow's default pool size).
LAUNCH_THREADS = {
    "h100": 224,  # DGX H100: 2 x Xeon Platinum 8480C, 56 cores, 2 threads each
    "a100": 256,  # DGX A100: 2 x EPYC 7742, 64 cores, 2 threads each
    "v100": 80,  # DGX-1 V100: 2 x Xeon E5-2698 v4, 20 cores, 2 threads each
    "t4": 32,  # assumption: a 16-core, 32-thread inference server
}

# Plausible [lo, hi] of the uncertain constants (derivation: docs/reference.md, "The host model").
RANGES = {
    "launch_contention": (0.0, 0.5),
    "op_overhead_us": (0.6, 6.0),
    "partition_overhead_us": (20.0, 200.0),
    "launch_us": (2.0, 4.0),
    "sync_us": (5.0, 20.0),
    "copy_latency_us": (2.0, 10.0),
}

# The uncertain box: each dimension moves its constants together from their low to their high end.
BOX = (
    ("launch_contention", ("launch_contention",)),
    ("host cost", ("op_overhead_us", "partition_overhead_us", "launch_us")),
    ("copy engine", ("sync_us", "copy_latency_us")),
)

# What a host profile may set: (type, minimum, maximum).
FIELDS = {
    "op_overhead_us": (float, 0.0, 10_000.0),
    "partition_overhead_us": (float, 0.0, 1_000_000.0),
    "launch_us": (float, 0.0, 10_000.0),
    "launch_contention": (float, 0.0, 1.0),
    "launch_threads": (int, 1, 4096),
    "sync_us": (float, 0.0, 100_000.0),
    "copy_latency_us": (float, 0.0, 100_000.0),
    "copy_streams": (int, 1, 4),  # TensorFlow accepts 1 to 4 device-to-device copy streams
    "merge_copy_streams": (bool, None, None),
}


@dataclass(frozen=True)
class HostProfile:
    """Figures a user measured: values replacing the defaults, and ranges replacing RANGES."""

    values: tuple = ()  # ((field, value), ...)
    ranges: tuple = ()  # ((field, (lo, hi)), ...)


def host_defaults(target_name):
    """The host constants of a product target."""
    return {**DEFAULTS, "launch_threads": LAUNCH_THREADS.get(target_name, LAUNCH_THREADS["t4"])}


def ranges_for(profile=None):
    """{field: (lo, hi)}: RANGES, a measured value pinning its field, a profile's range replacing it."""
    ranges = dict(RANGES)
    if profile is not None:
        for name, value in profile.values:
            if name in ranges:
                ranges[name] = (value, value)
        ranges.update(dict(profile.ranges))
    return ranges


def corners(target, ranges):
    """The targets at the corners of the uncertain box (2 ** len(BOX), duplicates dropped), point target first."""
    from dataclasses import replace

    out = []
    for k in range(1 << len(BOX)):
        values = {}
        for d, (_, names) in enumerate(BOX):
            end = (k >> d) & 1
            for name in names:
                values[name] = ranges[name][end]
        corner = replace(target, **values)
        if corner not in out:
            out.append(corner)
    return out


def host_settings(target):
    """The host model's constants a simulation ran with."""
    names = (
        "op_overhead_us",
        "launch_us",
        "launch_contention",
        "partition_overhead_us",
        "launch_threads",
        "sync_us",
        "copy_latency_us",
    )
    settings = {name: getattr(target, name) for name in names}
    settings["copy_streams"] = target.copy_streams
    settings["merge_copy_streams"] = target.merge_copy_streams
    return settings


def load_host_profile(path):
    """Read a host profile: {"<field>": value | {"value": v, "range": [lo, hi]}, ...} -> HostProfile.

    Read through msopt.files.reading: a regular file of at most MAX_HOST_PROFILE_BYTES whose numbers are finite and
    whose integers fit 64 bits (else one error naming the field); every value is then checked against FIELDS.
    """
    doc = read_json(path, "host profile", MAX_HOST_PROFILE_BYTES, field=_profile_field, numbers=NUMBERS)
    if not isinstance(doc, dict) or not doc:
        raise InputError(f'{path}: a host profile is a JSON object, e.g. {{"launch_us": 2.5, "op_overhead_us": 4}}')
    values, ranges = {}, {}
    for name, entry in doc.items():
        if name in ("source", "comment"):
            continue
        if name not in FIELDS:
            raise InputError(f"{path}: unknown host profile key '{name}'; known: {', '.join(FIELDS)}")
        if isinstance(entry, dict):
            unknown = set(entry) - {"value", "range"}
            if unknown or "value" not in entry:
                raise InputError(f'{path}: key \'{name}\' takes a number or {{"value": v, "range": [lo, hi]}}')
            values[name] = _check(path, name, entry["value"])
            if "range" in entry:
                ranges[name] = _check_range(path, name, entry["range"], values[name])
        else:
            values[name] = _check(path, name, entry)
    return HostProfile(tuple(sorted(values.items())), tuple(sorted(ranges.items())))


NUMBERS = "host profile values are finite numbers within each field's range (integers of at most 19 digits)"


def _profile_field(keys):
    """How a refused number in a host profile is named: 'launch_us', 'launch_us'.value, 'launch_us'.range[0]."""
    if not keys or not isinstance(keys[0], str):
        return None
    rest = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys[1:])
    return f"'{keys[0]}'{rest} is"


def _check(path, name, value):
    kind, lo, hi = FIELDS[name]
    if kind is bool:
        if not isinstance(value, bool):
            raise InputError(f"{path}: '{name}' must be true or false, got {value!r}")
        return value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not _finite(value) or (kind is int and value != int(value)):
        raise InputError(f"{path}: '{name}' must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if not lo <= value <= hi:
        raise InputError(f"{path}: '{name}' must be in [{lo:g}, {hi:g}], got {value!r}")
    return kind(value)


def _check_range(path, name, pair, value):
    if name not in RANGES:
        raise InputError(f"{path}: '{name}' has no range (ranges are for: {', '.join(RANGES)})")
    if not isinstance(pair, list) or len(pair) != 2:
        raise InputError(f"{path}: the range of '{name}' must be [lo, hi], got {pair!r}")
    lo, hi = (_check(path, name, v) for v in pair)
    if not lo <= value <= hi:
        raise InputError(f"{path}: the range of '{name}' [{lo:g}, {hi:g}] must hold its value {value:g}")
    return (lo, hi)


def _finite(value):
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
