"""The ``msopt run`` command: parses its options into a RunConfig, runs it (msopt.runner), prints the report."""

import click

from msopt.commands import options as opt
from msopt.commands.echo import print_json, progress
from msopt.commands.options import JSON, MODEL, TAGS
from msopt.errors import CheckFailed


@click.command("run")
@MODEL
@click.option("--signature", default=None, help="Signature to run (default: serving_default, or the only one).")
@click.option(
    "--streams",
    "-n",
    type=click.IntRange(1, 1024),
    default=None,
    help="Streams (devices) to run on. Default: as many as the model's _stream_id attributes name.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "gpu", "cpu"]),
    default="auto",
    show_default=True,
    help="auto: the GPU when TensorFlow sees one, else the CPU. Streams are virtual GPUs or logical CPUs.",
)
@click.option(
    "--batch-size",
    "-b",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Batch size of generated inputs (the unknown first dimension).",
)
@click.option(
    "--inputs",
    "inputs_npz",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read one input batch from this .npz (one array per signature input) instead of generating it.",
)
@click.option(
    "--records",
    type=click.IntRange(1, opt.MAX_RUN_RECORDS),
    default=1,
    show_default=True,
    help="Distinct generated input batches, cycled through by the steps.",
)
@opt.SEED
@click.option(
    "--iterations",
    "-k",
    type=click.IntRange(1, opt.MAX_RUN_STEPS),
    default=100,
    show_default=True,
    help="Measured steps.",
)
@click.option(
    "--warmup",
    "-w",
    type=click.IntRange(0, opt.MAX_RUN_STEPS),
    default=10,
    show_default=True,
    help="Unmeasured steps first.",
)
@click.option(
    "--save-outputs",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the outputs to this .npz: one array per output, one row per record.",
)
@click.option(
    "--compare-to",
    type=click.Path(),
    default=None,
    help="Also run this (unpartitioned) model on the same inputs; exit 1 unless outputs are identical.",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a Chrome trace of real executed steps (one track per device = stream).",
)
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(dir_okay=False),
    default=None,
    help='Write measured per-op times {"unit": "us", "ops": {node key: us}} for msopt partition --costs.',
)
@click.option(
    "--trace-steps",
    type=click.IntRange(1, 1000),
    default=3,
    show_default=True,
    help="Fully traced steps behind --trace and --profile (not part of the latency figures).",
)
@click.option(
    "--gpus",
    default=None,
    help="GPUs to use, e.g. 0,1 (nvidia-smi's indices; sets CUDA_VISIBLE_DEVICES, and CUDA_DEVICE_ORDER="
    "PCI_BUS_ID unless set). Streams are spread over them: stream k on GPU k mod G.",
)
@click.option(
    "--gpu-memory-fraction",
    type=opt.FiniteFloat(0, 1, min_open=True),
    default=None,
    help="Share of each GPU's memory to use, split among its streams (default 0.9, divided by "
    "--replicas: every replica shares every GPU).",
)
@click.option(
    "--allow-growth",
    is_flag=True,
    help="Allocate GPU memory on demand instead of up front (TF_FORCE_GPU_ALLOW_GROWTH=true).",
)
@click.option(
    "--stream-priority",
    default=None,
    help="CUDA priority per stream, comma-separated (one value applies to all), from -5 (runs first) "
    "to 0 (default); older GPUs accept a narrower range.",
)
@click.option("--mps", is_flag=True, help="Run the replicas under CUDA MPS (joins a running daemon or starts one).")
@click.option(
    "--mps-threads",
    type=click.IntRange(1, 100),
    default=None,
    help="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for each replica (with --mps).",
)
@click.option(
    "--replicas",
    "-r",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker processes running the model at once; throughput and latency are aggregated.",
)
@opt.concurrency(
    "Client threads keeping requests in flight (1 without --lanes: one request at a time, as before).", default=1
)
@opt.lanes(
    "Request-level lanes: request i runs on lane i mod K, each lane on its own virtual GPU (logical CPU "
    "device on the CPU), times --streams devices per lane. Default with --concurrency above 1: one lane."
)
@click.option(
    "--lane-weights",
    type=click.Choice(["shared", "copy"]),
    default=None,
    help="shared: one loaded TF2 object, each lane calls it under its device scope (variable reads stay on the "
    "variable's device); copy: each lane loads its own weights on its devices. Default: shared where possible.",
)
@click.option(
    "--launcher",
    type=click.Choice(["local", "mpirun"]),
    default="local",
    show_default=True,
    help="How --replicas start: local worker processes, or Open MPI's mpirun (one rank per replica, one GPU "
    "per local rank, MPI barrier and gather; needs openmpi-bin and mpi4py).",
)
@click.option(
    "--hosts",
    default=None,
    help="With --launcher mpirun: host:slots,... passed to mpirun -H (model and msopt at the same paths on each).",
)
@click.option(
    "--compare-layouts",
    is_flag=True,
    help="Run --replicas R processes (with --mps on a GPU), then --lanes K lanes in one process fed by R client "
    "threads, and report both side by side: records/s, latency, memory, and which gave more throughput for "
    "less memory. Example: msopt run MODEL --compare-layouts --replicas 2 --lanes 2 --device cpu --json",
)
@click.option("--stage", is_flag=True, help="Pipeline the model: the part above the boundary runs ahead in threads.")
@click.option(
    "--stage-boundary",
    default=None,
    help="Tensors where --stage cuts the model, comma-separated (default: found by the stage rule).",
)
@click.option(
    "--stage-threads",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Threads running the upstream part.",
)
@click.option(
    "--stage-capacity",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Records the upstream part may run ahead of the downstream part.",
)
@click.option(
    "--intra-op-threads",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Threads inside one op (0: TensorFlow's choice, all cores).",
)
@click.option(
    "--inter-op-threads",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Ops run at once (0: TensorFlow's choice).",
)
@click.option(
    "--merge-copy-streams",
    is_flag=True,
    help="GPU: run copies on the compute streams (GPUOptions.Experimental.stream_merge_options, TF >= 2.13); "
    "accepted on the CPU, where it has no effect (the report says so).",
)
@click.option("--worker-config", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.option("--worker-barrier", default=None, hidden=True)
@click.option("--worker-replicas", type=click.IntRange(1), default=1, hidden=True)
@opt.FORCE
@TAGS
@JSON
def run(
    model,
    signature,
    streams,
    device,
    batch_size,
    inputs_npz,
    records,
    seed,
    iterations,
    warmup,
    save_outputs,
    compare_to,
    trace_path,
    profile_path,
    trace_steps,
    gpus,
    gpu_memory_fraction,
    allow_growth,
    stream_priority,
    mps,
    mps_threads,
    replicas,
    concurrency,
    lanes,
    lane_weights,
    launcher,
    hosts,
    compare_layouts,
    stage,
    stage_boundary,
    stage_threads,
    stage_capacity,
    intra_op_threads,
    inter_op_threads,
    merge_copy_streams,
    worker_config,
    worker_barrier,
    worker_replicas,
    force,
    tags,
    as_json,
):
    """Run MODEL with its ops on their streams, and measure latency and throughput.

    Streams become devices before TensorFlow optimizes the graph: virtual GPUs (each its
    own compute stream) on a GPU, logical CPU devices on the CPU. Inputs are generated from
    the signature and what the graph says each input feeds (ids below their table's rows), or
    read with --inputs.

    The report (stdout with --json) holds latency_ms (mean, p50, p95, p99), throughput
    (steps and records per second), the device configuration and, with the options that
    ask for them, compare, trace, profile, stage and per_replica figures.

    With --concurrency C and --lanes K, C client threads keep requests in flight over K lanes;
    the report adds requests_per_lane, the weights' memory and executed.lane_to_device.

    \b
    Example:
      msopt partition sample_models/towers_tf1 -n 2 --policy towers -o /tmp/towers_ms2
      msopt run /tmp/towers_ms2 --device cpu --iterations 50 \\
          --compare-to sample_models/towers_tf1 --trace /tmp/towers.trace.json --json
      msopt run sample_models/deepfm_tf2 --device cpu --concurrency 8 --lanes 4 \\
          --compare-to sample_models/deepfm_tf2 --json
      msopt run sample_models/deepfm_tf2 --device cpu --compare-layouts --replicas 2 --lanes 2 --json
    """
    from msopt.runner.config import RunConfig
    from msopt.runner.run import run_model

    if worker_config:  # a replica worker: the parent's run, with its place in the run from the hidden options
        config = RunConfig.read(worker_config, worker_barrier=worker_barrier, worker_replicas=worker_replicas)
    else:
        params = click.get_current_context().params
        config = RunConfig(**{k: v for k, v in params.items() if k not in ("as_json", "worker_config")})
    document = run_model(config, progress)
    if document is None:  # an MPI rank other than 0: rank 0 reports for every rank
        return
    if as_json:
        print_json(document)
    elif compare_layouts:
        from msopt.runner.layouts import text

        click.echo(text(document))
    else:
        click.echo(_text(document))
    if document.get("compare") and not document["compare"]["ok"]:
        raise CheckFailed(f"outputs differ from {compare_to} (max abs diff {document['compare']['max_abs_diff']:g})")


def _text(doc):
    lines = [
        f"{doc['model']}: signature {doc['signature']} on {doc['streams']} {doc['device_type']} stream(s)"
        + (f", {doc['replicas']} replicas" if doc.get("replicas") else "")
    ]
    if "latency_ms" in doc:
        lat, thr = doc["latency_ms"], doc["throughput"]
        lines.append(
            f"  latency ms: mean {lat['mean']}, p50 {lat['p50']}, p95 {lat['p95']}, p99 {lat['p99']} "
            f"over {doc['steps']} steps (batch {doc['batch_size']})"
        )
        lines.append(f"  throughput: {thr['steps_per_s']} steps/s, {thr['records_per_s']} records/s")
    if doc.get("lanes"):
        lines.append(
            f"  {doc['lanes']} lane(s), concurrency {doc['concurrency']}, weights {doc['weights']['mode']} "
            f"({doc['weights']['bytes_total']} bytes); requests per lane: "
            + ", ".join(f"{k}: {n}" for k, n in doc["requests_per_lane"].items())
        )
        for lane, placed in doc["executed"]["lane_to_device"].items():
            lines.append(
                f"  lane {lane}: ops on {', '.join(sorted(placed['ops']))}; variable reads on "
                f"{', '.join(sorted(placed['variable_reads'])) or '-'}"
            )
    if doc.get("compare"):
        c = doc["compare"]
        lines.append(
            f"  compare to {c['model']}: {'identical' if c['ok'] else 'DIFFERENT'} (max abs diff {c['max_abs_diff']:g})"
        )
    if doc.get("stage"):
        s = doc["stage"]
        lines.append(
            f"  stage: {s['records']} records, {s['records_per_s']} records/s; blocked upstream "
            f"{s['upstream_blocked_s']} s, downstream {s['downstream_blocked_s']} s; "
            f"identical to unpipelined: {s['identical_to_unpipelined']}"
        )
    if doc.get("gpu_layout"):
        layout = doc["gpu_layout"]
        lines.append(
            f"  GPUs: {layout['gpus']} ({layout['rule']}): "
            + ", ".join(f"stream {r['stream']} -> GPU {r['gpu']}" for r in layout["streams"])
        )
    if doc.get("gpu_numerics"):
        lines.append(f"  compare on GPU: {doc['gpu_numerics']['note']}")
    if doc.get("merge_copy_streams"):
        lines.append(f"  merge copy streams: {doc['merge_copy_streams']}")
    if doc.get("mps"):
        lines.append(f"  MPS: {doc['mps']['pipe_directory']}")
    for key in ("trace", "profile"):
        if doc.get(key):
            lines.append(f"  {key}: {doc[key] if key == 'trace' else doc[key]['path']}")
    return "\n".join(lines)
