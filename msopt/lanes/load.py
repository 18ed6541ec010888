"""Concurrent load over lanes: C client threads keep requests in flight, request i on lane i mod K; the report."""

import threading
import time

from msopt.errors import InputError
from msopt.runner.tensorflow_runtime import error_line


def run_with_lanes(config, loaded, view, streams, priorities, progress):
    """``msopt run --concurrency C --lanes K``: load, check every lane's placement, measure, compare; the report."""
    from msopt.graph.contents import signatures
    from msopt.lanes.lanes import Lanes, can_share_weights, check_lane_options
    from msopt.runner.feeds import batch_of, choose_signature, make_records
    from msopt.runner.memory import process_memory
    from msopt.runner.timing import latency_summary

    lanes, concurrency = config.lanes or 1, config.concurrency
    check_lane_options(lanes, concurrency, streams, config.lane_weights, can_share_weights(loaded, streams))
    specs = signatures(loaded)
    if specs:
        chosen = choose_signature(specs, config.signature)
        make_records(specs[chosen]["inputs"], config.batch_size, 1, config.seed, config.inputs_npz, view)
    progress(f"loading TensorFlow: {lanes} lane(s) x {streams} stream(s)")
    pool = Lanes(
        loaded,
        view,
        lanes,
        streams,
        config.device,
        config.lane_weights,
        {
            "memory_fraction": config.gpu_memory_fraction,
            "allow_growth": config.allow_growth,
            "priorities": None if priorities is None else priorities * lanes,
            "intra_op_threads": config.intra_op_threads,
            "inter_op_threads": config.inter_op_threads,
        },
    )
    try:
        name = choose_signature(pool.specs, config.signature)
        feeds = make_records(
            pool.specs[name]["inputs"], config.batch_size, config.records, config.seed, config.inputs_npz, view
        )
        batch = batch_of(feeds[0], config.batch_size)
        try:
            executed = pool.executed_devices(name, feeds[0])  # each lane's first call: where its ops run
            steps = [[pool.step(k, name, f) for f in feeds] for k in range(lanes)]
            for k in range(lanes):  # warm-up, every lane
                for i in range(max(config.warmup, 1)):
                    steps[k][i % len(feeds)]()
        except InputError:
            raise
        except Exception as e:
            if type(e).__module__.startswith("tensorflow"):
                raise InputError(f"TensorFlow cannot run signature '{name}' on the lanes: {error_line(e)}") from None
            raise
        progress(f"measuring {config.iterations} requests from {concurrency} client thread(s)")
        result = drive(steps, config.iterations, concurrency, keep_outputs=bool(config.compare_to))
        document = {
            "model": config.model,
            "signature": name,
            "device_type": pool.device_type,
            "streams": streams,
            "lanes": lanes,
            "concurrency": concurrency,
            "devices": document_devices(pool),
            "inputs": {"source": config.inputs_npz or "generated", "records": len(feeds), "batch_size": batch},
            "warmup": max(config.warmup, 1),
            "weights": pool.describe_weights(),
            "requests_per_lane": result["per_lane"],
            "executed": {"lane_to_device": executed},
            "memory": process_memory(pool.tf, pool.device_type, document_devices(pool)),
        }
        if pool.layout is not None:
            document["gpu_layout"] = pool.layout.describe()
        document.update(latency_summary(result["latencies"], result["wall"], batch))
        if config.compare_to:
            document["compare"] = compare_responses(
                pool, config.compare_to, config.tags, name, feeds, result["responses"], progress
            )
        return document
    finally:
        pool.close()


def document_devices(pool):
    """Every device the lanes use, flat."""
    return [d for lane in pool.devices for d in lane]


def drive(steps, requests, concurrency, keep_outputs=False):
    """Run ``requests`` requests from ``concurrency`` threads; request i runs record i mod R on lane i mod K.

    ``steps[k][r]`` runs record r on lane k. Returns latencies (s, in request order), wall time,
    requests per lane and, with ``keep_outputs``, each request's (record, outputs)."""
    lanes, records = len(steps), len(steps[0])
    latencies = [0.0] * requests
    responses = [None] * requests if keep_outputs else None
    counter = iter(range(requests))
    lock = threading.Lock()
    errors = []
    start = threading.Barrier(concurrency + 1)
    clock = time.perf_counter

    def client():
        start.wait()
        while not errors:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t = clock()
            try:
                out = steps[i % lanes][i % records]()
            except BaseException as e:
                errors.append(e)
                return
            latencies[i] = clock() - t
            if keep_outputs:
                responses[i] = (i % records, out)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    start.wait()
    began = clock()
    for thread in threads:
        thread.join()
    wall = clock() - began
    if errors:
        e = errors[0]
        if type(e).__module__.startswith("tensorflow"):
            raise InputError(f"TensorFlow cannot run the request: {error_line(e)}") from None
        raise e
    per_lane = {str(k): len(range(k, requests, lanes)) for k in range(lanes)}
    return {"latencies": latencies, "wall": wall, "per_lane": per_lane, "responses": responses}


def compare_all(expected, responses):
    """(identical, max abs diff, differing request numbers) of every (record, outputs) response against
    ``expected[record]``."""
    from msopt.runner.verify import compare_outputs

    identical, worst, differing = True, 0.0, []
    for i, (record, outputs) in enumerate(responses):
        same, diff = compare_outputs(expected[record], outputs)
        if not same:
            differing.append(i)
        identical &= same
        worst = max(worst, diff)
    return identical, worst, differing


def compare_responses(pool, path, tags, name, feeds, responses, progress):
    """Every response bitwise against ``path`` run alone (one request at a time, default device) on the same record."""
    progress(f"running {path} for comparison")
    identical, worst, differing = compare_all(_reference(pool, path, tags, name, feeds), responses)
    return {
        "model": path,
        "records": len(feeds),
        "responses": len(responses),
        "ok": identical,
        "max_abs_diff": worst,
        "differing_requests": differing[:20],
    }


def _reference(pool, path, tags, name, feeds):
    from msopt.load import load
    from msopt.runner.devices import tensorflow_errors
    from msopt.runner.executable import Executable

    with tensorflow_errors("create a Session or context for the model"):
        other = Executable(
            load(path, tags), pool.lanes * pool.streams, pool.device_type, session_config=pool.config, eager=True
        )
    try:
        if name not in other.specs:
            raise InputError(f"--compare-to {path}: no signature '{name}'")
        try:
            return [other.run(name, f) for f in feeds]
        except Exception as e:
            raise InputError(
                f"--compare-to {path}: TensorFlow cannot run signature '{name}': {error_line(e)}"
            ) from None
    finally:
        other.close()
