"""One ``msopt run`` from its RunConfig: in this process, or over replica workers; returns the report."""

import os
import time

import numpy as np

from msopt.errors import InputError
from msopt.runner.devices import parse_priorities, request_allow_growth, set_visible_gpus
from msopt.runner.placed_model import streams_in
from msopt.runner.tensorflow_runtime import error_line


def run_model(config, progress=lambda message: None):
    """Run and measure ``config``'s model; ``progress(message)`` hears what is going on. Returns the report."""
    started = time.perf_counter()
    from msopt.runner.mpi_launcher import is_rank

    rank = bool(config.worker_barrier) and is_rank()
    if rank:  # started by mpirun: its GPU from its local rank; mpirun ends it when the run ends
        from msopt.runner.mpi_launcher import serve_as_rank

        config = serve_as_rank(config)
    elif config.worker_barrier:
        from msopt.runner.replicas import serve_as_worker

        serve_as_worker(config.worker_barrier)
    _check_paths(config)
    if config.hosts and config.launcher != "mpirun":
        raise InputError("--hosts applies with --launcher mpirun")
    if config.launcher == "mpirun":
        from msopt.runner.mpi_launcher import check_open_mpi, parse_hosts

        if config.mps:
            raise InputError("--launcher mpirun does not combine with --mps yet")
        parse_hosts(config.hosts)
        check_open_mpi()
    set_visible_gpus(config.gpus)
    if config.allow_growth:
        request_allow_growth()  # before TensorFlow creates its allocators, in this process and the replicas
    if config.compare_to:
        # A bitwise comparison needs both models to pick the same cuDNN algorithms (read once, at start).
        os.environ.setdefault("TF_CUDNN_USE_AUTOTUNE", "0")
    loaded, view = _open(config.model, config.tags)
    streams = config.streams or streams_in(view)
    priorities = parse_priorities(config.stream_priority, streams)
    if config.mps_threads is not None and not config.mps:
        raise InputError("--mps-threads applies with --mps")
    if config.compare_layouts:
        from msopt.runner.layouts import compare_layouts

        document = compare_layouts(config, loaded, view, streams, priorities, progress)
    elif config.uses_lanes:
        refused = {"--trace": config.trace_path, "--profile": config.profile_path, "--stage": config.stage}
        refused["--save-outputs"] = config.save_outputs
        for flag, value in refused.items():
            if value:
                raise InputError(f"{flag} does not combine with --lanes/--concurrency yet")
        if config.mps or config.replicas > 1:
            raise InputError("--lanes/--concurrency run in one process: drop --replicas/--mps to use them")
        from msopt.lanes.load import run_with_lanes

        document = run_with_lanes(config.with_absolute_paths(), loaded, view, streams, priorities, progress)
    elif config.mps or config.replicas > 1 or config.launcher == "mpirun":
        for flag, value in config.one_process_only:
            if value:
                raise InputError(f"{flag} runs in one process: drop --replicas/--mps to use it")
        from msopt.runner.replicas import run_replicated

        document = run_replicated(config, loaded, progress)
    else:
        document = run_here(config.with_absolute_paths(), loaded, view, streams, priorities, progress)
    document["elapsed_s"] = round(time.perf_counter() - started, 3)
    if rank:
        from msopt.runner.mpi_launcher import gather_reports

        return gather_reports(document)  # rank 0: every rank's report; the others: None
    return document


def _open(path, tags):
    from msopt.graph.view import GraphView
    from msopt.load import load

    model = load(path, tags)
    return model, GraphView(model.graph_def)


def run_here(config, loaded, view, streams, priorities, progress):
    """One process: place, load, check inputs, compare, measure, trace, stage (paths in ``config`` absolute)."""
    from msopt.graph.contents import signatures
    from msopt.runner.devices import bitwise_gpu_numerics
    from msopt.runner.feeds import batch_of, choose_signature, make_records
    from msopt.runner.memory import process_memory
    from msopt.runner.placed_model import Runner
    from msopt.runner.tensorflow_runtime import import_tensorflow
    from msopt.runner.timing import latency_summary, timed_steps

    specs = signatures(loaded)  # checked before TensorFlow loads, when the model declares signatures
    if specs:
        chosen = choose_signature(specs, config.signature)
        make_records(specs[chosen]["inputs"], config.batch_size, 1, config.seed, config.inputs_npz, view)
    progress("loading TensorFlow")
    import_tensorflow()
    runner = Runner(
        loaded,
        view,
        streams,
        config.device,
        config.gpu_memory_fraction,
        config.allow_growth,
        priorities,
        config.intra_op_threads,
        config.inter_op_threads,
        replicas=config.worker_replicas,
        merge_copy_streams=config.merge_copy_streams,
    )
    try:
        name = choose_signature(runner.specs, config.signature)
        spec = runner.specs[name]
        feeds = make_records(spec["inputs"], config.batch_size, config.records, config.seed, config.inputs_npz, view)
        batch = batch_of(feeds[0], config.batch_size)
        document = {
            "model": config.model,
            "signature": name,
            "device_type": runner.device_type,
            "streams": streams,
            "devices": [runner.layout.device_name(k) if runner.layout else f"/device:CPU:{k}" for k in range(streams)],
            "placement": {"assigned_nodes": len(runner.partition), "constraint_merges": runner.merges},
            "inputs": {"source": config.inputs_npz or "generated", "records": len(feeds), "batch_size": batch},
            "warmup": config.warmup,
        }
        if config.merge_copy_streams:
            document["merge_copy_streams"] = (
                "set: copies run on the compute streams (GPUOptions.Experimental.stream_merge_options)"
                if runner.device_type == "gpu"
                else "no effect on the CPU: TensorFlow has no copy streams there"
            )
        if runner.layout is not None:
            document["gpu_layout"] = runner.layout.describe()
        if config.compare_to and runner.device_type == "gpu":
            document["gpu_numerics"] = bitwise_gpu_numerics(runner.tf)
        steps = [_checked_step(runner.executable, name, f) for f in feeds]
        first = [step() for step in steps]  # also checks that the model runs at all
        if config.compare_to:
            document["compare"] = _compare(runner, config.compare_to, config.tags, name, feeds, first, progress)
        if config.save_outputs:
            _save(config.save_outputs, first)
        if config.stage:
            from msopt.runner.stage import run_stage

            document["stage"] = run_stage(runner, view, name, feeds, first, config, progress)
        else:
            latencies, wall, started = timed_steps(steps, config.iterations, config.warmup, config.worker_barrier)
            document.update(latency_summary(latencies, wall, batch))
            if config.worker_barrier:
                document.update(
                    latencies_ms=[round(x * 1e3, 4) for x in latencies],
                    pid=os.getpid(),
                    memory=process_memory(runner.tf, runner.device_type, document["devices"]),
                    started_unix=time.time() - (time.perf_counter() - started),
                )
        if config.trace_path or config.profile_path:
            from msopt.runner.trace import trace_run

            document.update(trace_run(runner, name, feeds[0], config, progress))
        return document
    finally:
        runner.close()


def _checked_step(executable, name, feeds):
    step = executable.step(name, feeds)

    def checked():
        try:
            return step()
        except Exception as e:
            if type(e).__module__.startswith("tensorflow"):
                raise InputError(f"TensorFlow cannot run signature '{name}': {error_line(e)}") from None
            raise

    return checked


def _compare(runner, path, tags, name, feeds, got, progress):
    from msopt.load import load
    from msopt.runner.verify import compare_outputs

    progress(f"running {path} for comparison")
    other = runner.load_other(load(path, tags))
    try:
        if name not in other.specs:
            raise InputError(f"--compare-to {path}: no signature '{name}'")
        identical, worst = True, 0.0
        for f, outputs in zip(feeds, got):
            try:
                expected = other.run(name, f)
            except Exception as e:  # TensorFlow's runtime errors come in many types
                raise InputError(
                    f"--compare-to {path}: TensorFlow cannot run signature '{name}': {error_line(e)}"
                ) from None
            same, diff = compare_outputs(expected, outputs)
            identical &= same
            worst = max(worst, diff)
    finally:
        other.close()
    return {"model": path, "records": len(feeds), "ok": identical, "max_abs_diff": worst}


def _check_paths(config):
    """Every path the run writes, checked against what it reads before anything runs (msopt.files.output_guard)."""
    from msopt.files.output_guard import Output, check

    written = (
        ("--save-outputs", config.save_outputs, "npz"),
        ("--trace", config.trace_path, "json"),
        ("--profile", config.profile_path, "json"),
    )
    reads = (config.model, config.inputs_npz, config.compare_to)
    check(reads, [Output(*row) for row in written if row[1] is not None], config.force)


def _save(path, outputs):
    from msopt.files.outputs import put, staged

    arrays = {k: np.stack([o[k] for o in outputs]) for k in outputs[0]}
    with staged(path) as built:  # np.savez writes to a file object: built whole, then put in place
        with open(built, "wb") as f:
            np.savez(f, **arrays)
        put(built, path, force=True)  # msopt.files.output_guard decided before the run
