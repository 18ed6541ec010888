"""The outputs of a tune written whole: the chosen model, its costs file, the fitted host profile and the report,
with Ctrl-C held back until all are in place (each file is itself put in place in one step by msopt.files.outputs)."""

import contextlib
import json
import signal
import threading

from msopt import emit
from msopt.files.outputs import write_bytes


@contextlib.contextmanager
def interrupts_held():
    """Hold SIGINT while the block runs; a Ctrl-C meanwhile is raised as KeyboardInterrupt once it is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def write_outputs(model, candidate, config, placement_devices, costs, report, host_profile=None):
    """Write the chosen candidate's model, the costs file, the fitted host profile (when there is one) and the
    report (``report`` gets their paths first)."""
    report.update(output=str(config.output), costs=config.costs_path, report=config.report_path)
    report["host_profile"] = config.host_profile_path if host_profile is not None else None
    report["profile"]["path"] = config.costs_path
    with interrupts_held():
        emit.write(
            model,
            candidate.partition,
            config.output,
            placement="device",
            device_type=placement_devices,
            force=config.force,
            const_copies=candidate.const_copies,
        )
        write_bytes(config.costs_path, json.dumps(costs, indent=2).encode())
        if host_profile is not None:
            write_bytes(config.host_profile_path, json.dumps(host_profile, indent=2).encode())
        write_bytes(config.report_path, json.dumps(report, indent=2, default=str).encode())
