"""The schedule simulator: hand-built graphs whose makespan is known exactly, sample models, the timeline and the CLI."""

import json

import pytest
from conftest import SAMPLES

from msopt.graph import protos
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.simulator.cost import CostModel, Target
from msopt.simulator.simulate import simulate
from msopt.simulator.timeline import chrome_trace

pytestmark = pytest.mark.tf

SMALL = [1]  # one element: a kernel that occupies 1/sms of the GPU
LARGE = [4_000_000]  # enough threads to fill the GPU: share 1


def target(launch=0.0, sync=0.0, copy_latency=0.0, memory_gbs=2.0):
    """A GPU whose overheads the test sets; copy bandwidth = memory_gbs / 2 GB/s (1 GB/s = 1000 bytes per us)."""
    return Target(
        "test",
        "test GPU",
        sms=80,
        fp32_tflops=10.0,
        gemm_tflops=10.0,
        fp16_tflops=10.0,
        memory_gbs=memory_gbs,
        launch_us=launch,
        sync_us=sync,
        copy_latency_us=copy_latency,
    )


def graph(spec):
    """spec: [(name, op, inputs, shape)]: float tensors with recorded _output_shapes."""
    g = protos.GraphDef()
    for name, op, inputs, shape in spec:
        node = g.node.add(name=name, op=op)
        node.input.extend(inputs)
        node.attr["T"].type = 1  # float
        if op == "Placeholder":
            node.attr["dtype"].type = 1
        out = node.attr["_output_shapes"].list.shape.add()
        for d in shape:
            out.dim.add(size=d)
    return GraphView(g)


def chains(shape):
    """x -> a -> b and x -> c -> d: two independent chains of two kernels."""
    return graph(
        [
            ("x", "Placeholder", [], shape),
            ("a", "Relu", ["x"], shape),
            ("b", "Relu", ["a"], shape),
            ("c", "Relu", ["x"], shape),
            ("d", "Relu", ["c"], shape),
        ]
    )


def run(view, partition, streams, costs, gpu=None, batch_size=1):
    cm = CostModel(view, None, target=gpu or target(), batch_size=batch_size, costs=costs)
    return simulate(view, partition, streams, cm)


TEN = {"a": 10, "b": 10, "c": 10, "d": 10}


def at(result, key, times):
    """The start or end time of op ``key``."""
    return times[result.cost_model.tasks.key.index(key)]


def test_two_small_chains_on_two_streams_halve_the_time():
    r = run(chains(SMALL), {"c": 1, "d": 1}, 2, TEN)
    assert r.single_stream_us == pytest.approx(40.0)
    assert r.makespan_us == pytest.approx(20.0)
    rep = r.report()
    assert rep["speedup"] == pytest.approx(2.0)
    assert rep["critical_path_ms"] == pytest.approx(0.020)
    assert rep["ratio_to_bound"] == pytest.approx(1.0)
    assert rep["syncs"] == 0 and rep["copy_bytes"] == 0  # a placeholder is read in place by both streams
    assert rep["stream_busy_ms"] == [pytest.approx(0.020), pytest.approx(0.020)]


def test_kernels_that_fill_the_gpu_gain_nothing_from_streams():
    r = run(chains(LARGE), {"c": 1, "d": 1}, 2, TEN)
    # a and c share the GPU: each runs at half speed and ends at 20; then b and d likewise.
    assert [at(r, k, r.end) for k in "abcd"] == [pytest.approx(20.0), pytest.approx(40.0)] * 2
    assert r.makespan_us == pytest.approx(40.0)
    assert r.report()["total_work_ms"] == pytest.approx(0.040)
    assert r.report()["ratio_to_bound"] == pytest.approx(1.0)


def test_partial_overlap_slows_both_kernels_by_the_excess_demand():
    view = graph([("x", "Placeholder", [], SMALL), ("a", "Relu", ["x"], LARGE), ("c", "Relu", ["x"], SMALL)])
    r = run(view, {"c": 1}, 2, {"a": 10, "c": 10})
    demand = 1.0 + 1.0 / 80
    assert r.makespan_us == pytest.approx(10.0 * demand)
    assert r.single_stream_us == pytest.approx(20.0)


def test_cross_stream_edge_costs_a_sync_and_a_copy():
    view = graph([("x", "Placeholder", [], SMALL), ("a", "Relu", ["x"], [250]), ("b", "Relu", ["a"], [250])])
    gpu = target(sync=10.0, copy_latency=5.0, memory_gbs=2.0)  # 1000 bytes: 1 us of copy
    r = run(view, {"b": 1}, 2, {"a": 10, "b": 10}, gpu)
    assert r.makespan_us == pytest.approx(10 + 10 + 5 + 1 + 10)
    assert r.single_stream_us == pytest.approx(20.0)
    rep = r.report()
    assert (rep["syncs"], rep["copies"], rep["copy_bytes"]) == (1, 1, 1000)
    assert rep["speedup"] < 1.0
    (wait,) = r.waits
    assert (wait["src_stream"], wait["dst_stream"], wait["bytes"]) == (0, 1, 1000)
    assert wait["ready_us"] - wait["at_us"] == pytest.approx(16.0)


def test_one_copy_per_tensor_and_destination_stream():
    view = graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], [250]),
            ("b", "Relu", ["a"], [250]),
            ("c", "Relu", ["a"], [250]),
            ("d", "Relu", ["a"], [250]),
        ]
    )
    r = run(view, {"b": 1, "c": 1, "d": 2}, 3, {k: 1 for k in "abcd"})
    assert (r.syncs, r.copies, r.copy_bytes) == (2, 2, 2000)


def test_control_edge_across_streams_costs_a_sync_but_no_copy():
    view = graph([("x", "Placeholder", [], SMALL), ("a", "Relu", ["x"], [250]), ("b", "Relu", ["x", "^a"], [250])])
    r = run(view, {"b": 1}, 2, {"a": 10, "b": 10}, target(sync=7.0, copy_latency=5.0))
    assert r.makespan_us == pytest.approx(27.0)
    assert (r.syncs, r.copies, r.copy_bytes) == (1, 0, 0)


def test_host_launch_overhead_serializes_launches():
    view = graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], SMALL),
            ("b", "Relu", ["a"], SMALL),
            ("c", "Relu", ["b"], SMALL),
        ]
    )
    r = run(view, {}, 1, {"a": 1, "b": 1, "c": 1}, target(launch=3.0))
    # launched at 3, 6, 9; each runs 1 us right after its launch.
    assert [at(r, k, r.start) for k in "abc"] == [pytest.approx(3.0), pytest.approx(6.0), pytest.approx(9.0)]
    assert r.makespan_us == pytest.approx(10.0)
    bound = r.report()
    assert bound["host_launch_ms"] == pytest.approx(0.009) and bound["lower_bound_ms"] == pytest.approx(0.009)


@pytest.mark.parametrize("threads, makespan", [(1, 7.0), (2, 4.0)])
def test_several_launch_threads_launch_at_once(threads, makespan):
    from dataclasses import replace

    view = graph([("x", "Placeholder", [], SMALL), ("a", "Relu", ["x"], SMALL), ("b", "Relu", ["x"], SMALL)])
    r = run(view, {"b": 1}, 2, {"a": 1, "b": 1}, replace(target(launch=3.0), launch_threads=threads))
    assert r.makespan_us == pytest.approx(makespan)
    assert r.report()["host_launch_ms"] == pytest.approx(0.006 / threads)


def test_long_kernels_hide_the_launches_behind_them():
    view = graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], SMALL),
            ("b", "Relu", ["a"], SMALL),
            ("c", "Relu", ["b"], SMALL),
        ]
    )
    r = run(view, {}, 1, {"a": 100, "b": 100, "c": 100}, target(launch=3.0))
    assert r.makespan_us == pytest.approx(303.0)


def test_stream_is_in_order_even_for_independent_kernels():
    # a and c on one stream run one after the other although independent; b (other stream) waits for nothing.
    view = graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], SMALL),
            ("b", "Relu", ["x"], SMALL),
            ("c", "Relu", ["x"], SMALL),
        ]
    )
    r = run(view, {"b": 1}, 2, {"a": 10, "b": 10, "c": 10})
    assert r.makespan_us == pytest.approx(20.0)
    assert r.busy_us == [pytest.approx(20.0), pytest.approx(10.0)]


def test_no_kernel_ops_pass_data_through_in_zero_time():
    view = graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], [250]),
            ("i", "Identity", ["a"], [250]),
            ("b", "Relu", ["i"], [250]),
        ]
    )
    r = run(view, {"b": 1}, 2, {"a": 10, "b": 10}, target(sync=2.0, copy_latency=3.0))
    # the Identity sits on stream 0 with a: the copy to stream 1 starts when a's data exists (t=10).
    assert r.makespan_us == pytest.approx(10 + 2 + 3 + 1 + 10)
    assert sum(r.cost_model.kernel) == 2


def test_events_list_every_kernel_in_start_order():
    r = run(chains(SMALL), {"c": 1, "d": 1}, 2, TEN)
    events = r.events()
    assert [(e["key"], e["stream"]) for e in events] == [("a", 0), ("c", 1), ("b", 0), ("d", 1)]
    assert [(e["start_us"], e["end_us"]) for e in events] == [(0, 10), (0, 10), (10, 20), (10, 20)]
    assert all(e["op"] == "Relu" for e in events)


def test_out_of_range_stream_is_refused():
    with pytest.raises(ValueError, match="outside"):
        run(chains(SMALL), {"c": 2}, 2, TEN)


def test_a_function_body_runs_where_its_caller_runs_unless_placed(sample_cost):
    model, view, cm = sample_cost("towers_tf2", target="v100", batch_size=4)
    call = next(
        n.key
        for n in view.real_nodes()
        if n.function == ""
        and n.op == "StatefulPartitionedCall"
        and any(cm.tasks.instances[k][0] == n.key for k in range(1, len(cm.tasks.instances)))
    )
    r = simulate(view, {call: 1}, 2, cm)
    body = [i for i in range(len(cm)) if cm.tasks.instance[i] != 0]
    assert body and all(r.stream_of[i] == 1 for i in body)
    some = cm.tasks.key[body[0]]
    r = simulate(view, {call: 1, some: 0}, 2, cm)
    assert r.stream_of[body[0]] == 0 and all(r.stream_of[i] == 1 for i in body[1:] if cm.tasks.key[i] != some)


def tower_partition(cm):
    return {k: (1 if "tower_1/" in k else 0) for k in cm.tasks.key}


@pytest.mark.parametrize("batch", [1, 64])
def test_towers_overlap_on_two_streams(batch, sample_cost):
    model, view, cm = sample_cost("towers_tf2", target="v100", batch_size=batch)
    r = simulate(view, tower_partition(cm), 2, cm)
    rep = r.report()
    assert rep["makespan_ms"] >= rep["lower_bound_ms"] * (1 - 1e-9)
    if batch == 64:  # two identical towers with real work: parallelism pays
        assert rep["makespan_ms"] < rep["single_stream_ms"]
    else:  # tiny kernels: the host bounds both runs; one executor does all the host work on one stream, two share it
        assert rep["host_launch_ms"] >= rep["critical_path_ms"]
        assert rep["single_stream_ms"] >= 2 * rep["host_launch_ms"] * (1 - 1e-9)
    assert rep["syncs"] >= 1 and rep["copy_bytes"] > 0  # the two towers' logits meet on stream 0
    assert min(rep["stream_busy_ms"]) > 0


@pytest.mark.parametrize(
    "name",
    [
        "linreg_tf1",
        "linreg_tf2",
        "towers_tf1",
        "towers_tf2",
        "stage_tf1",
        "stage_tf2",
        "deepfm_tf1",
        "deepfm_tf2",
        "linreg_frozen.pb",
        "linreg_frozen.pbtxt",
        "towers_tf1.meta",
        "custom_op_tf1",
    ],
)
@pytest.mark.parametrize("streams", [1, 3])
def test_every_sample_simulates_within_its_bounds(name, streams, sample_cost):
    model, view, cm = sample_cost(name, target="a100", batch_size=8)
    assert len(cm) > 0 and sum(cm.kernel) > 0
    spread = {k: i % streams for i, k in enumerate(cm.tasks.key)}  # the worst case: round robin over all ops
    for partition in ({}, spread):
        r = simulate(view, partition, streams, cm)
        rep = r.report()
        assert rep["makespan_ms"] >= rep["lower_bound_ms"] * (1 - 1e-9) > 0
        assert rep["single_stream_ms"] >= rep["lower_bound_ms"] * (1 - 1e-9)
        assert len(rep["stream_busy_ms"]) == streams
        assert all(r.end[i] >= r.start[i] for i in range(len(cm)))
        for i in range(len(cm)):  # every op starts after its inputs end
            for src, _ in cm.tasks.inputs[i]:
                assert r.start[i] >= r.end[src] - 1e-9 or not cm.kernel[i]
    assert simulate(view, {}, streams, cm).makespan_us == pytest.approx(cm.single_stream_us())


def test_timeline_is_chrome_trace_with_a_track_per_stream_and_flows(sample_cost):
    model, view, cm = sample_cost("towers_tf2", target="v100", batch_size=8)
    r = simulate(view, tower_partition(cm), 2, cm)
    trace = json.loads(json.dumps(chrome_trace(r)))
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"stream 0", "stream 1"} <= names
    slices = [e for e in events if e["ph"] == "X" and e["cat"] != "wait"]
    assert len(slices) == sum(cm.kernel)
    assert {e["tid"] for e in slices} == {0, 1}
    begins = [e for e in events if e["ph"] == "b"]
    assert len(begins) == len(r.waits) == len([e for e in events if e["ph"] == "e"]) > 0
    assert all(e["args"]["bytes"] >= 0 for e in begins)
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert starts and len(starts) == len(ends) and {e["id"] for e in starts} == {e["id"] for e in ends}
    for e in slices:
        assert e["dur"] >= 0 and e["ts"] >= 0


def test_simulate_command_json_and_timeline(msopt, tmp_path):
    trace = tmp_path / "trace.json"
    result = msopt(
        "simulate",
        SAMPLES / "towers_tf2",
        "--streams",
        2,
        "--policy",
        "none",
        "--target",
        "t4",
        "--batch-size",
        16,
        "--timeline",
        trace,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    for key in (
        "makespan_ms",
        "single_stream_ms",
        "speedup",
        "lower_bound_ms",
        "ratio_to_bound",
        "syncs",
        "copy_bytes",
        "stream_busy_ms",
    ):
        assert key in doc
    assert doc["target"] == "t4" and doc["batch_size"] == 16 and doc["streams"] == 2 and doc["launch_threads"] == 1
    assert doc["makespan_ms"] == pytest.approx(doc["single_stream_ms"])  # policy none: no _stream_id on this model
    assert json.loads(trace.read_text())["traceEvents"]


def test_simulate_command_text_and_existing_streams(msopt):
    result = msopt("simulate", SAMPLES / "linreg_tf1", "--streams", 2, "--policy", "none", "--target", "v100")
    assert result.returncode == 0, result.stderr
    assert "makespan" in result.stdout and "lower bound" in result.stdout and "syncs 1" in result.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["--target", "k80"], ["unknown target", "h100"]),
        (["--batch-size", "0"], ["batch-size"]),
        (["--streams", "1", "--policy", "none"], ["outside [0, 1)"]),
    ],
)
def test_simulate_command_bad_input(msopt, args, words):
    result = msopt("simulate", SAMPLES / "linreg_tf1", *args)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msopt: error:") and all(w in lines[0] for w in words), result.stderr


def test_partition_report_carries_the_simulated_figures(msopt, tmp_path):
    out = tmp_path / "out"
    result = msopt(
        "partition",
        SAMPLES / "linreg_tf1",
        "--streams",
        2,
        "--policy",
        "none",
        "-o",
        out,
        "--target",
        "v100",
        "--batch-size",
        4,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    sim = json.loads(result.stdout)["simulated"]
    assert sim["target"] == "v100" and sim["batch_size"] == 4 and sim["streams"] == 2
    assert sim["syncs"] >= 1 and sim["makespan_ms"] >= sim["lower_bound_ms"]


def test_times_measured_by_the_runner_drive_the_simulation(msopt, tmp_path):
    """msopt run --profile writes real per-op times (TensorFlow on the CPU here); simulate --costs reads them."""
    profile = tmp_path / "costs.json"
    ran = msopt(
        "run",
        SAMPLES / "towers_tf2",
        "--device",
        "cpu",
        "--iterations",
        2,
        "--warmup",
        1,
        "--batch-size",
        4,
        "--profile",
        profile,
        "--json",
    )
    assert ran.returncode == 0, ran.stderr
    measured = json.loads(profile.read_text())
    assert measured["unit"] == "us" and measured["ops"]
    result = msopt(
        "simulate",
        SAMPLES / "towers_tf2",
        "--streams",
        2,
        "--policy",
        "none",
        "--batch-size",
        4,
        "--costs",
        profile,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    model = load(SAMPLES / "towers_tf2")
    cm = CostModel(GraphView(model.graph_def), model, target="h100", batch_size=4, costs=str(profile))
    assert doc["ops_measured"] == cm.measured > 0
    assert doc["single_stream_ms"] == pytest.approx(cm.single_stream_us() / 1e3, rel=1e-6)
