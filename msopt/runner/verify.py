"""Check that a rewritten model computes exactly what the original does (bitwise, on generated or given inputs)."""

import numpy as np

from msopt.errors import InputError, check_interrupted
from msopt.files.inputs import InputGenerator, read_npz
from msopt.graph.view import GraphView
from msopt.runner.executable import Executable
from msopt.runner.tensorflow_runtime import error_line
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
def verify(original, rewritten, devices, device_type="cpu", batch_size=3, seed=0, inputs_npz=None, tolerance=None):
    """Run every signature of both models on the same inputs (generated, or read from ``inputs_npz``);
    returns a report dict.

    The original failing to load or run is bad input (InputError); the rewritten model failing
    is a failed check: the report says ok False and carries the error. ``ok`` means bitwise
    equal, or, with a ``tolerance``, a max abs difference within it (``identical`` then says
    whether the bits are the same). When outputs differ, ``differences`` names the executed
    nodes TensorFlow rewrote differently in the two models, and why.
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
            feeds = (
                read_npz(inputs_npz, spec["inputs"])
                if inputs_npz
                else InputGenerator(spec["inputs"], view)(batch_size, seed)
            )
            try:
                expected = before.run(name, feeds)
            except Exception as e:  # TensorFlow's runtime errors come in many types
                source = (
                    f"the inputs of {inputs_npz}"
                    if inputs_npz
                    else "generated inputs (pass real ones with --inputs FILE.npz)"
                )
                raise InputError(f"{original.path}: signature '{name}' fails on {source}: {error_line(e)}") from None
            try:
                identical, worst = compare_outputs(expected, after.run(name, feeds))
            except Exception as e:
                report["signatures"][name] = {"identical": False, "max_abs_diff": float("inf")}
                report.setdefault("error", f"signature '{name}' of the rewritten model fails: {error_line(e)}")
                continue
            report["signatures"][name] = {"identical": identical, "max_abs_diff": worst}
            if not identical and "differences" not in report:
                report["differences"] = executed_differences(before, after, name, feeds, devices, soft)
    finally:
        before.close()
        after.close()
    report["identical"] = all(s["identical"] for s in report["signatures"].values())
    report["max_abs_diff"] = max((s["max_abs_diff"] for s in report["signatures"].values()), default=0.0)
    report["ok"] = report["identical"] or (
        tolerance is not None and "error" not in report and report["max_abs_diff"] <= tolerance
    )
    if tolerance is not None:
        report["tolerance"] = tolerance
    return report


# -- why outputs differ: what TensorFlow rewrote differently in the two models ---------------------
UNCHANGED_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv", "_Arg", "_Retval", "NoOp", "Const"})


def executed_differences(before, after, signature, feeds, devices, soft_placement=False, limit=10):
    """[{node, original, rewritten, why}]: executed nodes whose op or inputs differ between the two
    models' runs (RunMetadata partition graphs), i.e. rewrites TensorFlow made in one model only."""
    try:
        graphs = [_executed(exe, signature, feeds, devices, soft_placement) for exe in (before, after)]
    except Exception as e:  # the runs themselves succeeded a moment ago; explaining is best effort
        check_interrupted()  # unless the error is an interrupt TensorFlow turned into its own
        return [{"node": None, "why": f"could not trace the runs: {error_line(e)}"}]
    old, new = graphs
    rows = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b or (a and b and a[0] == b[0] and sorted(a[1]) == sorted(b[1])):
            continue
        rows.append({"node": name, "original": _show(a), "rewritten": _show(b), "why": _why(name, a, b, graphs)})
    if not rows:
        return [
            {
                "node": None,
                "why": "both models run the same kernels on the same inputs: the difference comes "
                "from a kernel whose result depends on the device it runs on",
            }
        ]
    return rows[:limit] + (
        [{"node": None, "why": f"{len(rows) - limit} more node(s) differ"}] if len(rows) > limit else []
    )


def _executed(exe, signature, feeds, devices, soft_placement):
    """{node name: (op, inputs)} of one traced run, Send/Recv pairs and per-stream Const copies folded away."""
    tf = exe.tf
    if hasattr(exe, "_functions"):
        from tensorflow.python.eager import context

        # A function's partition graphs are recorded when it is instantiated: trace a fresh load.
        context.enable_run_metadata()
        try:
            fresh = Executable(exe.model, devices, "cpu", soft_placement=soft_placement)
            fresh.run(signature, feeds)
            metadata = context.export_run_metadata()
        finally:
            context.disable_run_metadata()
        partitions = [g for f in metadata.function_graphs for g in f.partition_graphs]
    else:
        spec = exe.specs[signature]
        metadata = tf.compat.v1.RunMetadata()
        step = exe.tensor_step(
            [o["name"] for o in spec["outputs"].values()],
            [spec["inputs"][k]["name"] for k in feeds],
            options=tf.compat.v1.RunOptions(output_partition_graphs=True),
            run_metadata=metadata,
        )
        step(*feeds.values())
        partitions = list(metadata.partition_graphs)
    recv = {n.name for g in partitions for n in g.node if n.op in ("_Recv", "_HostRecv")}
    executed = {}
    for graph in partitions:
        for node in graph.node:
            if node.op in UNCHANGED_OPS or "/_ms_copy_" in node.name:
                continue
            inputs = tuple(_source(i, recv) for i in node.input if not i.startswith("^"))
            executed.setdefault(node.name, (node.op, inputs))
    return executed


def _source(tensor, recv):
    name = tensor.split(":")[0]
    if name in recv:
        name = name.rsplit("/_", 1)[0]  # a _Recv is named for the tensor it carries
    return name.split("/_ms_copy_")[0]


def _show(entry):
    return None if entry is None else f"{entry[0]}({', '.join(entry[1])})"


def _why(name, old, new, graphs):
    scope = name.rsplit("/", 1)[0] + "/ArithmeticOptimizer/"
    if (
        "ArithmeticOptimizer/" in name
        or any(n.startswith(scope) for g in graphs for n in g)
        or any("ArithmeticOptimizer/" in i for e in (old, new) if e for i in e[1])
    ):
        return (
            "grappler's arithmetic optimizer regrouped these Add/Mul nodes in one model only (it does so only "
            "while they share a device): they sum in another order"
        )
    ops = {e[0] for e in (old, new) if e}
    if any(op.startswith("_") and "Fused" in op for op in ops) or (old is None) != (new is None):
        return "fused into one kernel in one model only (grappler remapper or oneDNN): other rounding"
    return f"runs as {old[0]} in the original and as {new[0]} in the rewrite"
