"""Check that a rewritten model computes exactly what the original does (bitwise, on generated or given inputs)."""
import numpy as np

from msopt.errors import InputError
from msopt.runner.executable import Executable
from msopt.runner.tensorflow_runtime import error_line
from msopt.graph import GraphView
from msopt.inputs import InputGenerator, read_npz
from msopt.runner.workdir import runs_models


def compare_outputs(expected, actual):
    """(identical bitwise, max abs difference) over matching output dicts."""
    identical, worst = True, 0.0
    for key, want in expected.items():
        got = actual.get(key)
        want, got = np.asarray(want), np.asarray(got) if got is not None else None
        if got is None or got.shape != want.shape or got.dtype != want.dtype:
            return False, float("inf")
        if want.dtype == object:
            same = bool(np.all(want == got))
        else:
            same = want.tobytes() == got.tobytes()
            if want.size and np.issubdtype(want.dtype, np.number):
                diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
                worst = max(worst, float(np.nanmax(diff)) if not np.all(np.isnan(diff)) else 0.0)
        identical &= same
    return identical, worst


@runs_models  # a graph's save op must not write into the user's directory
def verify(original, rewritten, devices, device_type="cpu", batch_size=3, seed=0, inputs_npz=None):
    """Run every signature of both models on the same inputs (generated, or read from ``inputs_npz``);
    returns a report dict.

    The original failing to load or run is bad input (InputError); the rewritten model failing
    is a failed check: the report says ok False and carries the error.
    """
    soft = device_type != "cpu"  # GPU device strings fall back to the CPU when no GPU exists
    before = Executable(original, devices, "cpu", soft_placement=soft)
    report = {"devices": devices, "device_type": "cpu", "signatures": {}, "inputs": inputs_npz or "generated"}
    try:
        after = Executable(rewritten, devices, "cpu", soft_placement=soft, variable_values=before.variable_values())
    except InputError as e:
        before.close()
        return {**report, "ok": False, "max_abs_diff": float("inf"), "error": str(e)}
    view = GraphView(original.graph_def)
    try:
        for name, spec in before.specs.items():
            feeds = read_npz(inputs_npz, spec["inputs"]) if inputs_npz else InputGenerator(spec["inputs"], view)(batch_size, seed)
            try:
                expected = before.run(name, feeds)
            except Exception as e:  # TensorFlow's runtime errors come in many types
                source = f"the inputs of {inputs_npz}" if inputs_npz else "generated inputs (pass real ones with --inputs FILE.npz)"
                raise InputError(f"{original.path}: signature '{name}' fails on {source}: {error_line(e)}") from None
            try:
                identical, worst = compare_outputs(expected, after.run(name, feeds))
            except Exception as e:
                report["signatures"][name] = {"identical": False, "max_abs_diff": float("inf")}
                report.setdefault("error", f"signature '{name}' of the rewritten model fails: {error_line(e)}")
                continue
            report["signatures"][name] = {"identical": identical, "max_abs_diff": worst}
    finally:
        before.close()
        after.close()
    report["ok"] = all(s["identical"] for s in report["signatures"].values())
    report["max_abs_diff"] = max((s["max_abs_diff"] for s in report["signatures"].values()), default=0.0)
    return report
