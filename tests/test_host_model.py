"""The host model: per-stream executors on the inter-op pool, per-op overhead, launch contention, copy streams,
host profiles and the ranges over the host assumptions, on hand-built graphs whose figures are known exactly."""

import json
from dataclasses import replace

import pytest
from conftest import SAMPLES
from test_simulate import SMALL, at, graph, run, target

from msopt.graph.view import GraphView
from msopt.load import load
from msopt.simulator.cost import TARGETS, CostModel
from msopt.simulator.host_model import BOX, RANGES, corners, load_host_profile, ranges_for
from msopt.simulator.uncertainty import corner_figures, ranges

MANY = 1024  # inter-op threads: the pool never binds


def two_kernels():
    """x -> a, x -> b: two independent 1 us kernels."""
    return graph([("x", "Placeholder", [], SMALL), ("a", "Relu", ["x"], SMALL), ("b", "Relu", ["x"], SMALL)])


def test_each_stream_launches_from_its_own_executor():
    gpu = replace(target(launch=3.0), launch_threads=MANY)
    parallel = run(two_kernels(), {"b": 1}, 2, {"a": 1, "b": 1}, gpu)
    assert parallel.makespan_us == pytest.approx(4.0)  # both launched by 3, on two executors
    serial = run(two_kernels(), {}, 2, {"a": 1, "b": 1}, gpu)
    assert serial.makespan_us == pytest.approx(7.0)  # one stream, one executor: launches at 3 and 6
    assert parallel.report()["launch_threads"] == 2 and serial.report()["launch_threads"] == 1


def test_per_op_overhead_is_paid_by_every_op_on_its_executor():
    view = graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], SMALL),
            ("i", "Identity", ["a"], SMALL),
            ("b", "Relu", ["i"], SMALL),
        ]
    )
    r = run(view, {}, 1, {"a": 1, "b": 1}, replace(target(launch=3.0), op_overhead_us=2.0))
    # x handled 0-2; a 2-4, launched 7; i 7-9; b 9-11, launched 14, runs 14-15.
    assert [at(r, k, r.start) for k in "ab"] == [pytest.approx(7.0), pytest.approx(14.0)]
    assert r.makespan_us == pytest.approx(15.0)
    assert r.report()["host_launch_ms"] == pytest.approx((2 * 3 + 4 * 2) / 1000)


@pytest.mark.parametrize("contention, makespan", [(0.0, 5.0), (0.5, 7.0), (1.0, 9.0)])
def test_launch_contention_serializes_that_share_of_each_launch(contention, makespan):
    gpu = replace(target(launch=4.0), launch_threads=MANY, launch_contention=contention)
    r = run(two_kernels(), {"b": 1}, 2, {"a": 1, "b": 1}, gpu)
    # Each launch: (1 - c) x 4 us on its thread, then c x 4 us on the driver's shared resource, one at a time.
    assert r.makespan_us == pytest.approx(makespan)
    if contention == 1.0:  # one launch at a time: two streams launch no faster than one
        assert r.makespan_us == pytest.approx(run(two_kernels(), {}, 2, {"a": 1, "b": 1}, gpu).makespan_us)


def fan_out():
    """a (1000 bytes) read by b on stream 1 and c on stream 2: two copies leave stream 0 at once."""
    return graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], [250]),
            ("b", "Relu", ["a"], [250]),
            ("c", "Relu", ["a"], [250]),
        ]
    )


@pytest.mark.parametrize("copy_streams, ends", [(0, (16, 16)), (1, (16, 22)), (2, (16, 16))])
def test_copies_queue_on_the_producing_streams_copy_streams(copy_streams, ends):
    gpu = replace(target(copy_latency=5.0, memory_gbs=2.0), copy_streams=copy_streams, launch_threads=MANY)
    r = run(fan_out(), {"b": 1, "c": 2}, 3, {"a": 10, "b": 1, "c": 1}, gpu)
    # a ends at 10; each copy takes 5 + 1 us; one copy stream takes them one after the other.
    assert sorted(w["ready_us"] for w in r.waits) == [pytest.approx(e) for e in ends]


def test_merged_copies_run_on_the_compute_stream_and_delay_its_next_kernel():
    view = graph(
        [
            ("x", "Placeholder", [], SMALL),
            ("a", "Relu", ["x"], [250]),
            ("b", "Relu", ["a"], [250]),
            ("c", "Relu", ["x"], SMALL),
        ]
    )
    base = replace(target(copy_latency=5.0, memory_gbs=2.0), copy_streams=1, launch_threads=MANY)
    apart = run(view, {"b": 1}, 2, {"a": 10, "b": 1, "c": 1}, base)
    merged = run(view, {"b": 1}, 2, {"a": 10, "b": 1, "c": 1}, replace(base, merge_copy_streams=True))
    assert at(apart, "c", apart.start) == pytest.approx(10.0)  # the copy stream copies while c runs
    assert at(merged, "c", merged.start) == pytest.approx(16.0)  # the copy runs on stream 0 before c
    assert at(apart, "b", apart.start) == at(merged, "b", merged.start) == pytest.approx(16.0)
    assert merged.report()["host"]["merge_copy_streams"] is True


def test_each_further_stream_starts_its_executor_later():
    gpu = replace(target(), launch_threads=MANY, partition_overhead_us=50.0)
    r = run(two_kernels(), {"b": 1}, 2, {"a": 1, "b": 1}, gpu)
    assert at(r, "a", r.start) == pytest.approx(0.0) and at(r, "b", r.start) == pytest.approx(50.0)
    assert run(two_kernels(), {}, 2, {"a": 1, "b": 1}, gpu).makespan_us == pytest.approx(2.0)


def test_product_targets_carry_the_host_defaults_and_their_sources():
    from msopt.simulator.host_model import DEFAULTS, SOURCES

    for name, t in TARGETS.items():
        for key, value in DEFAULTS.items():
            assert getattr(t, key) == value, (name, key)
        assert t.launch_threads > 1
    assert set(DEFAULTS) | {"launch_threads"} <= set(SOURCES)
    for key, (lo, hi) in RANGES.items():
        assert lo <= DEFAULTS[key] <= hi, key


def test_corners_span_the_box_and_a_profile_pins_what_it_measured(tmp_path):
    t = TARGETS["h100"]
    assert len(corners(t, ranges_for(None))) == 2 ** len(BOX)
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"launch_contention": 0.1, "launch_us": {"value": 2.5, "range": [2.0, 3.0]}}))
    profile = load_host_profile(str(path))
    pinned = ranges_for(profile)
    assert pinned["launch_contention"] == (0.1, 0.1) and pinned["launch_us"] == (2.0, 3.0)
    assert len(corners(t, pinned)) == 2 ** (len(BOX) - 1)  # the contention dimension collapsed


def test_ranges_hold_the_point_estimate():
    model = load(SAMPLES / "towers_tf2")
    view = GraphView(model.graph_def)
    cm = CostModel(view, model, target="h100", batch_size=1)
    partition = {k: (1 if "tower_1/" in k else 0) for k in cm.tasks.key}
    from msopt.simulator.simulate import simulate

    point = simulate(view, partition, 2, cm)
    doc = {**point.report(), **ranges(view, partition, 2, cm, point)}
    lo, hi = doc["speedup_range"]
    assert lo <= doc["speedup"] <= hi and lo < hi
    assert doc["makespan_ms_range"][0] <= doc["makespan_ms"] <= doc["makespan_ms_range"][1]
    assert doc["robust"] == (min(s / m for m, s in corner_figures(view, partition, 2, cm)) >= 1 - 1e-9)


def test_simulate_reports_ranges_and_reads_a_host_profile(msopt, tmp_path):
    profile = tmp_path / "host.json"
    profile.write_text(json.dumps({"op_overhead_us": 3.5, "launch_contention": 1.0, "merge_copy_streams": True}))
    args = ("simulate", SAMPLES / "towers_tf2", "--streams", 2, "--policy", "towers", "--json")
    result = msopt(*args, "--host-profile", profile)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["host"]["op_overhead_us"] == 3.5 and doc["host"]["merge_copy_streams"] is True
    assert doc["speedup_range"][0] <= doc["speedup"] <= doc["speedup_range"][1]
    assert isinstance(doc["robust"], bool)
    text = msopt(*args[:-1])
    assert text.returncode == 0 and "over the host assumptions" in text.stdout


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"launch_contention": 1.5}', ["launch_contention", "[0, 1]"]),
        ('{"launch_speed": 2}', ["unknown host profile key", "launch_speed"]),
        ('{"launch_us": "fast"}', ["launch_us", "number"]),
        ('{"copy_streams": 9}', ["copy_streams", "[1, 4]"]),
        ('{"merge_copy_streams": 1}', ["merge_copy_streams", "true or false"]),
        ('{"launch_us": {"value": 5, "range": [1, 3]}}', ["range", "launch_us"]),
        ("[1, 2]", ["JSON object"]),
        ("{not json", ["not JSON"]),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "partition"])
def test_a_bad_host_profile_is_one_line_and_exit_2(msopt, tmp_path, content, words, command):
    path = tmp_path / "host.json"
    path.write_text(content)
    out = tmp_path / "out"
    extra = ("-o", out) if command == "partition" else ()
    result = msopt(command, SAMPLES / "linreg_tf1", "--host-profile", path, *extra)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msopt: error:") and str(path) in lines[0], result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert not out.exists()


def test_fewer_pool_threads_than_streams_never_stalls_the_host_loop():
    """A woken executor whose op finds every pool thread busy kept requeueing behind its own backlog forever
    (found by tune's host fit); the run must finish, in a child process so a regression fails instead of hanging."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        from dataclasses import replace
        from msopt.load import open_model
        from msopt.planning.plan import CostOptions, PlanOptions, build_cost_model, make_plan
        from msopt.simulator.simulate import simulate
        loaded, view = open_model({str(SAMPLES / "towers_tf1")!r})
        options = PlanOptions(streams=3, policy="chains", cost=CostOptions("v100", 1))
        cm = build_cost_model(view, loaded, options.cost)
        plan = make_plan(view, options, loaded, cm).partition
        for threads in (1, 2):
            slow = replace(cm.target, launch_threads=threads, op_overhead_us=100, partition_overhead_us=20,
                           launch_contention=0)
            print(simulate(view, plan, 3, cm.with_target(slow)).makespan_us)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    one, two = map(float, done.stdout.split())
    assert one >= two > 0  # a second pool thread never slows the run
