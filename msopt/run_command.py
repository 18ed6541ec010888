"""The ``msopt run`` command: execute a model on its streams and measure it (replicas, MPS, stage pipeline)."""
import os
import sys
import time

import click
import numpy as np

from msopt.cli import JSON, MODEL, TAGS, open_model, print_json, progress, write_json
from msopt.errors import CheckFailed, InputError
from msopt.execute import error_line


@click.command("run")
@MODEL
@click.option("--signature", default=None, help="Signature to run (default: serving_default, or the only one).")
@click.option("--streams", "-n", type=click.IntRange(1, 1024), default=None,
              help="Streams (devices) to run on. Default: as many as the model's _stream_id attributes name.")
@click.option("--device", type=click.Choice(["auto", "gpu", "cpu"]), default="auto", show_default=True,
              help="auto: the GPU when TensorFlow sees one, else the CPU. Streams are virtual GPUs or logical CPUs.")
@click.option("--batch-size", "-b", type=click.IntRange(1), default=8, show_default=True,
              help="Batch size of generated inputs (the unknown first dimension).")
@click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False), default=None,
              help="Read one input batch from this .npz (one array per signature input) instead of generating it.")
@click.option("--records", type=click.IntRange(1), default=1, show_default=True,
              help="Distinct generated input batches, cycled through by the steps.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generated inputs.")
@click.option("--iterations", "-k", type=click.IntRange(1), default=100, show_default=True, help="Measured steps.")
@click.option("--warmup", "-w", type=click.IntRange(0), default=10, show_default=True, help="Unmeasured steps first.")
@click.option("--save-outputs", type=click.Path(dir_okay=False), default=None,
              help="Write the outputs to this .npz: one array per output, one row per record.")
@click.option("--compare-to", type=click.Path(), default=None,
              help="Also run this (unpartitioned) model on the same inputs; exit 1 unless outputs are identical.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="Write a Chrome trace of real executed steps (one track per device = stream).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help='Write measured per-op times {"unit": "us", "ops": {node key: us}} for msopt partition --costs.')
@click.option("--trace-steps", type=click.IntRange(1), default=3, show_default=True,
              help="Fully traced steps behind --trace and --profile (not part of the latency figures).")
@click.option("--gpus", default=None,
              help="GPUs to use, e.g. 0,1 (nvidia-smi's indices; sets CUDA_VISIBLE_DEVICES, and CUDA_DEVICE_ORDER="
                   "PCI_BUS_ID unless set). Streams are spread over them: stream k on GPU k mod G.")
@click.option("--gpu-memory-fraction", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Share of each GPU's memory to use, split among its streams (default 0.9, divided by "
                   "--replicas: every replica shares every GPU).")
@click.option("--allow-growth", is_flag=True,
              help="Allocate GPU memory on demand instead of up front (TF_FORCE_GPU_ALLOW_GROWTH=true).")
@click.option("--stream-priority", default=None,
              help="CUDA priority per stream, comma-separated (one value applies to all), from -5 (runs first) "
                   "to 0 (default); older GPUs accept a narrower range.")
@click.option("--mps", is_flag=True, help="Run the replicas under CUDA MPS (joins a running daemon or starts one).")
@click.option("--mps-threads", type=click.IntRange(1, 100), default=None,
              help="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for each replica (with --mps).")
@click.option("--replicas", "-r", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes running the model at once; throughput and latency are aggregated.")
@click.option("--stage", is_flag=True, help="Pipeline the model: the part above the boundary runs ahead in threads.")
@click.option("--stage-boundary", default=None,
              help="Tensors where --stage cuts the model, comma-separated (default: found by the stage rule).")
@click.option("--stage-threads", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Threads running the upstream part.")
@click.option("--stage-capacity", type=click.IntRange(1), default=1, show_default=True,
              help="Records the upstream part may run ahead of the downstream part.")
@click.option("--intra-op-threads", type=click.IntRange(0), default=0, show_default=True,
              help="Threads inside one op (0: TensorFlow's choice, all cores).")
@click.option("--inter-op-threads", type=click.IntRange(0), default=0, show_default=True,
              help="Ops run at once (0: TensorFlow's choice).")
@click.option("--worker-barrier", default=None, hidden=True)
@click.option("--worker-replicas", type=click.IntRange(1), default=1, hidden=True)
@TAGS
@JSON
def run(model, signature, streams, device, batch_size, inputs_npz, records, seed, iterations, warmup, save_outputs,
        compare_to, trace_path, profile_path, trace_steps, gpus, gpu_memory_fraction, allow_growth, stream_priority,
        mps, mps_threads, replicas, stage, stage_boundary, stage_threads, stage_capacity, intra_op_threads,
        inter_op_threads, worker_barrier, worker_replicas, tags, as_json):
    """Run MODEL with its ops on their streams, and measure latency and throughput.

    Streams become devices before TensorFlow optimizes the graph: virtual GPUs (each its
    own compute stream) on a GPU, logical CPU devices on the CPU. Inputs are generated from
    the signature and what the graph says each input feeds (ids below their table's rows), or
    read with --inputs.

    The report (stdout with --json) holds latency_ms (mean, p50, p95, p99), throughput
    (steps and records per second), the device configuration and, with the options that
    ask for them, compare, trace, profile, stage and per_replica figures.

    \b
    Example:
      msopt partition sample_models/towers_tf1 -n 2 --policy towers -o /tmp/towers_ms2
      msopt run /tmp/towers_ms2 --device cpu --iterations 50 \\
          --compare-to sample_models/towers_tf1 --trace /tmp/towers.trace.json --json
    """
    from msopt.runner import parse_priorities, request_allow_growth, set_visible_gpus, streams_in

    started = time.perf_counter()
    if worker_barrier:
        from msopt.replicas import serve_as_worker

        serve_as_worker(worker_barrier)
    set_visible_gpus(gpus)
    if allow_growth:
        request_allow_growth()  # before TensorFlow creates its allocators, in this process and the replicas
    if compare_to:
        # A bitwise comparison needs both models to pick the same cuDNN algorithms (read once, at start).
        os.environ.setdefault("TF_CUDNN_USE_AUTOTUNE", "0")
    loaded, view = open_model(model, tags)
    streams = streams or streams_in(view)
    priorities = parse_priorities(stream_priority, streams)
    if mps_threads is not None and not mps:
        raise InputError("--mps-threads applies with --mps")
    if mps or replicas > 1:
        for flag, value in (("--trace", trace_path), ("--profile", profile_path), ("--save-outputs", save_outputs),
                            ("--compare-to", compare_to), ("--stage", stage)):
            if value:
                raise InputError(f"{flag} runs in one process: drop --replicas/--mps to use it")
        document = _run_replicas(model, loaded, signature, inputs_npz, mps, mps_threads, replicas)
    else:
        options = {**click.get_current_context().params, "streams": streams, "priorities": priorities}
        document = _run_here(loaded, view, options)
    document["elapsed_s"] = round(time.perf_counter() - started, 3)
    if as_json:
        print_json(document)
    else:
        click.echo(_text(document))
    if document.get("compare") and not document["compare"]["ok"]:
        raise CheckFailed(f"outputs differ from {compare_to} (max abs diff {document['compare']['max_abs_diff']:g})")


def _run_replicas(model, loaded, signature, inputs_npz, mps, mps_threads, replicas):
    """The parent of ``replicas`` workers: checks what it can without TensorFlow, then runs them (under MPS)."""
    from msopt.inspect import signatures
    from msopt.replicas import run_replicas
    from msopt.runner import choose_signature, read_npz

    specs = signatures(loaded)
    if specs:
        name = choose_signature(specs, signature)
        if inputs_npz:
            read_npz(inputs_npz, specs[name]["inputs"])
    worker_args = _worker_args(sys.argv) + ["--worker-replicas", str(replicas)]
    if not mps:
        progress(f"starting {replicas} replicas")
        return {**run_replicas(worker_args, replicas), "mps": None}
    from msopt.mps import MpsDaemon, check_client_limit, visible_by_uuid

    daemon = MpsDaemon()  # checks first that the NVIDIA tools are there
    check_client_limit(replicas)
    visible_by_uuid()  # the daemon remaps indices; UUIDs name the same GPUs for it and its clients
    with daemon:
        progress(f"MPS daemon on {daemon.pipe_dir}; starting {replicas} replicas")
        document = run_replicas(worker_args, replicas, env=daemon.client_env(mps_threads),
                                on_ready=daemon.check_clients)
        daemon.check_alive()
        document["mps"] = {**daemon.describe(), "active_thread_percentage": mps_threads,
                           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    for k, replica in enumerate(document["per_replica"]):
        if replica.get("device_type") != "gpu":
            raise CheckFailed(f"--mps: replica {k} ran on the {replica.get('device_type') or 'unknown device'}, "
                              f"not a GPU: TensorFlow saw no GPU there, so MPS had no effect")
    return document


def _worker_args(argv):
    """This command's arguments minus the ones only the parent acts on."""
    args = list(argv[argv.index("run") + 1:]) if "run" in argv else list(argv[1:])
    drop_flag = {"--mps", "--json"}
    drop_value = {"--replicas", "-r", "--mps-threads", "--gpus"}  # --gpus: the workers inherit CUDA_VISIBLE_DEVICES
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in drop_flag:
            continue
        if name in drop_value:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def _run_here(loaded, view, o):
    """One process: place, load, check inputs, compare, measure, trace, stage (``o``: the command's options)."""
    from msopt.execute import import_tensorflow
    from msopt.inspect import signatures
    from msopt.runner import (Runner, batch_of, bitwise_gpu_numerics, choose_signature, latency_summary,
                              make_records, measure)

    specs = signatures(loaded)  # checked before TensorFlow loads, when the model declares signatures
    if specs:
        chosen = choose_signature(specs, o["signature"])
        make_records(specs[chosen]["inputs"], o["batch_size"], 1, o["seed"], o["inputs_npz"], view)
    progress("loading TensorFlow")
    import_tensorflow()
    o = {**o, **{k: os.path.abspath(o[k]) for k in PATH_OPTIONS if o[k]}}  # the Runner works in a directory of its own
    runner = Runner(loaded, view, o["streams"], o["device"], o["gpu_memory_fraction"], o["allow_growth"],
                    o["priorities"], o["intra_op_threads"], o["inter_op_threads"], replicas=o["worker_replicas"])
    try:
        name = choose_signature(runner.specs, o["signature"])
        spec = runner.specs[name]
        feeds = make_records(spec["inputs"], o["batch_size"], o["records"], o["seed"], o["inputs_npz"], view)
        batch = batch_of(feeds[0], o["batch_size"])
        document = {
            "model": o["model"], "signature": name, "device_type": runner.device_type, "streams": o["streams"],
            "devices": [runner.layout.device_name(k) if runner.layout else f"/device:CPU:{k}"
                        for k in range(o["streams"])],
            "placement": {"assigned_nodes": len(runner.partition), "constraint_merges": runner.merges},
            "inputs": {"source": o["inputs_npz"] or "generated", "records": len(feeds), "batch_size": batch},
            "warmup": o["warmup"],
        }
        if runner.layout is not None:
            document["gpu_layout"] = runner.layout.describe()
        if o["compare_to"] and runner.device_type == "gpu":
            document["gpu_numerics"] = bitwise_gpu_numerics(runner.tf)
        steps = [_checked_step(runner.executable, name, f) for f in feeds]
        first = [step() for step in steps]  # also checks that the model runs at all
        if o["compare_to"]:
            document["compare"] = _compare(runner, o["compare_to"], o["tags"], name, feeds, first)
        if o["save_outputs"]:
            _save(o["save_outputs"], first)
        if o["stage"]:
            document["stage"] = _run_stage(runner, view, name, feeds, first, o)
            steps = None
        if steps is not None:
            latencies, wall, started = _measure(steps, o["iterations"], o["warmup"], o["worker_barrier"], measure)
            document.update(latency_summary(latencies, wall, batch))
            if o["worker_barrier"]:
                document.update(latencies_ms=[round(x * 1e3, 4) for x in latencies], pid=os.getpid(),
                                started_unix=time.time() - (time.perf_counter() - started))
        if o["trace_path"] or o["profile_path"]:
            document.update(_trace(runner, name, feeds[0], o))
        return document
    finally:
        runner.close()


PATH_OPTIONS = ("inputs_npz", "save_outputs", "compare_to", "trace_path", "profile_path")


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


def _measure(steps, iterations, warmup, barrier, measure):
    from msopt.replicas import wait_for_start

    bar = None
    if sys.stderr.isatty() and not barrier:
        bar = click.progressbar(length=iterations, label="msopt: measuring", file=sys.stderr)
        bar.__enter__()
    try:
        measure(steps, 0, warmup)
        if barrier:
            wait_for_start(barrier)
        every = max(1, iterations // 100)
        tick = (lambda i: bar.update(every) if (i + 1) % every == 0 else None) if bar else None
        return measure(steps, iterations, 0, tick)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


def _compare(runner, path, tags, name, feeds, got):
    from msopt.load import load
    from msopt.verify import compare_outputs

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
                raise InputError(f"--compare-to {path}: TensorFlow cannot run signature '{name}': {error_line(e)}") from None
            same, diff = compare_outputs(expected, outputs)
            identical &= same
            worst = max(worst, diff)
    finally:
        other.close()
    return {"model": path, "records": len(feeds), "ok": identical, "max_abs_diff": worst}


def _save(path, outputs):
    arrays = {k: np.stack([o[k] for o in outputs]) for k in outputs[0]}
    tmp = f"{path}.tmp-{os.getpid()}.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _trace(runner, name, feeds, o):
    from msopt.trace import chrome_trace, costs_document, executed_devices, executed_names, has_kernel_rows

    progress(f"tracing {o['trace_steps']} steps")
    metadata = runner.traced_steps(name, feeds, o["trace_steps"])
    names = executed_names(runner.view)
    placed = executed_devices(metadata[-1], names)
    streams_on = {}
    for key, stream in runner.partition.items():
        if key in placed:
            streams_on.setdefault(str(stream), {}).setdefault(placed[key], 0)
            streams_on[str(stream)][placed[key]] += 1
    result = {"executed": {"nodes_traced": len(placed), "stream_to_device": streams_on}}
    if runner.layout is not None:  # the physical GPU (visible index) behind each stream's devices
        result["executed"]["stream_to_gpu"] = {
            stream: sorted({runner.layout.gpu_of_device(d) for d in devices} - {None})
            for stream, devices in streams_on.items()}
    if o["trace_path"]:
        write_json(o["trace_path"], chrome_trace(metadata, names))
        result["trace"] = o["trace_path"]
    if o["profile_path"]:
        costs, unmapped = costs_document(metadata, names)
        write_json(o["profile_path"], costs)
        result["profile"] = {"path": o["profile_path"], "ops": len(costs["ops"]), "unmapped_executed_nodes": unmapped}
        if runner.device_type == "gpu" and not has_kernel_rows(metadata):
            result["profile"]["note"] = "no GPU kernel rows (is CUPTI loadable?): GPU ops are charged launch times"
            click.echo(f"msopt: note: {result['profile']['note']}", err=True)
    return result


def _run_stage(runner, view, name, feeds, model_outputs, o):
    from msopt.stage_pipeline import SessionSplit, StagePipeline, boundary_tensors, cuttable
    from msopt.verify import compare_outputs

    executable, names = cuttable(runner, name)
    if o["stage_boundary"]:
        boundary = boundary_tensors(executable.graph, names, given=o["stage_boundary"].split(","))
    else:
        boundary = boundary_tensors(executable.graph, names, edges=_stage_rule_edges(view))
    split = SessionSplit(executable, name, boundary)
    count, n = o["iterations"], len(feeds)
    # The unpipelined run: the whole signature on the same graph, record by record.
    whole = [executable.step(name, f)() for f in feeds]
    model_diff = max(compare_outputs(m, w)[1] for m, w in zip(model_outputs, whole))
    for i in range(min(o["warmup"], n)):
        split.downstream(split.upstream(feeds[i]), feeds[i])
    mismatches = []

    def deliver(i, outputs):  # every record, in the order delivered, against its own unpipelined outputs
        if not compare_outputs(whole[i % n], outputs)[0]:
            mismatches.append(i)

    pipeline = StagePipeline(lambda i: (i, split.upstream(feeds[i % n])),
                             lambda item: split.downstream(item[1], feeds[item[0] % n]),
                             o["stage_threads"], o["stage_capacity"])
    progress(f"pipelining {count} records through {o['stage_threads']} stage thread(s)")
    stats = pipeline.run(count, deliver)
    stats["identical_to_unpipelined"] = not mismatches
    if mismatches:
        raise CheckFailed(f"--stage: record {mismatches[0]} differs from the unpipelined run")
    frozen = executable is not runner.session_executable
    return {**split.describe(), **stats, "graph": "frozen copy of the TF2 signature" if frozen else "the model's graph",
            "max_abs_diff_to_model": model_diff}


def _stage_rule_edges(view):
    """Edges from the stage rule's stage stream into the rest (the rule marks the input subgraph)."""
    from msopt.rules import POLICIES, PartitionOptions, run_policy

    if "stage" not in POLICIES:
        raise InputError("--stage needs --stage-boundary (the stage rule is not available)")
    plan = run_policy("stage", view, PartitionOptions(streams=2))
    return [(src, node.key) for node in view.real_nodes() if plan.get(node.key, 0) == 0
            for src, _ in node.inputs if plan.get(src, 0) != 0]


def _text(doc):
    lines = [f"{doc['model']}: signature {doc['signature']} on {doc['streams']} {doc['device_type']} stream(s)"
             + (f", {doc['replicas']} replicas" if doc.get("replicas") else "")]
    if "latency_ms" in doc:
        lat, thr = doc["latency_ms"], doc["throughput"]
        lines.append(f"  latency ms: mean {lat['mean']}, p50 {lat['p50']}, p95 {lat['p95']}, p99 {lat['p99']} "
                     f"over {doc['steps']} steps (batch {doc['batch_size']})")
        lines.append(f"  throughput: {thr['steps_per_s']} steps/s, {thr['records_per_s']} records/s")
    if doc.get("compare"):
        c = doc["compare"]
        lines.append(f"  compare to {c['model']}: {'identical' if c['ok'] else 'DIFFERENT'} (max abs diff {c['max_abs_diff']:g})")
    if doc.get("stage"):
        s = doc["stage"]
        lines.append(f"  stage: {s['records']} records, {s['records_per_s']} records/s; blocked upstream "
                     f"{s['upstream_blocked_s']} s, downstream {s['downstream_blocked_s']} s; "
                     f"identical to unpipelined: {s['identical_to_unpipelined']}")
    if doc.get("gpu_layout"):
        layout = doc["gpu_layout"]
        lines.append(f"  GPUs: {layout['gpus']} ({layout['rule']}): " + ", ".join(
            f"stream {r['stream']} -> GPU {r['gpu']}" for r in layout["streams"]))
    if doc.get("gpu_numerics"):
        lines.append(f"  compare on GPU: {doc['gpu_numerics']['note']}")
    if doc.get("mps"):
        lines.append(f"  MPS: {doc['mps']['pipe_directory']}")
    for key in ("trace", "profile"):
        if doc.get(key):
            lines.append(f"  {key}: {doc[key] if key == 'trace' else doc[key]['path']}")
    return "\n".join(lines)
