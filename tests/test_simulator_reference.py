"""The compiled simulator against the plain Python event loop it replaced (tests/reference_simulator.py): the same
floats, to the last bit, on random task graphs under random hosts, on the sample models and in the closed loop."""

import random
import subprocess
import sys
from dataclasses import replace

import pytest
import reference_simulator as reference
from conftest import SAMPLES
from random_tasks import random_cost_model, random_streams

from msopt.planning.plan import PlanOptions, make_plan
from msopt.simulator import concurrency
from msopt.simulator.cost import TARGETS
from msopt.simulator.simulate import _run, simulate, single_stream, streams_of


def assert_same(result, expected):
    """Every figure of ``result`` (a Result) equals the reference run's exactly."""
    assert result.start == expected["start"]
    assert result.end == expected["end"]
    assert result.makespan_us == expected["makespan"]
    assert result.busy_us == expected["busy"]
    assert (result.syncs, result.copies, result.copy_bytes) == (
        expected["syncs"],
        expected["copies"],
        expected["copy_bytes"],
    )
    assert result._waits == expected["waits"]


@pytest.mark.parametrize("seed", range(300))
def test_random_graphs_under_random_hosts_simulate_to_the_same_floats(seed):
    cm = random_cost_model(seed)
    streams = random.Random(seed).randint(1, 8)
    stream_of = random_streams(cm, streams, seed)
    record = seed % 3 != 0
    assert_same(_run(cm, streams, stream_of, record), reference.run(cm, streams, stream_of, record))


@pytest.mark.parametrize("seed", range(12))
def test_larger_random_graphs_simulate_to_the_same_floats(seed):
    rng = random.Random(1000 + seed)
    cm = random_cost_model(1000 + seed, size=rng.randint(500, 3000), layer_width=rng.randint(4, 64))
    streams = rng.randint(2, 8)
    stream_of = random_streams(cm, streams, seed)
    assert_same(_run(cm, streams, stream_of, True), reference.run(cm, streams, stream_of, True))
    assert single_stream(cm).makespan_us == reference.run(cm, 1, [0] * len(cm), False)["makespan"]


@pytest.mark.parametrize("size", [0, 1, 2])
def test_the_smallest_runs_simulate_to_the_same_floats(size):
    for seed in range(20):
        cm = random_cost_model(seed, size=size)
        stream_of = random_streams(cm, 3, seed)
        assert_same(_run(cm, 3, stream_of, True), reference.run(cm, 3, stream_of, True))


def test_the_random_graphs_cover_what_the_loop_distinguishes():
    """Copies, control syncs, pass-through chains, idle pools and every host switch occur among the seeds above."""
    seen = set()
    for seed in range(300):
        cm = random_cost_model(seed)
        target = cm.target
        streams = random.Random(seed).randint(1, 8)
        r = _run(cm, streams, random_streams(cm, streams, seed), True)
        seen |= {("copies", r.copies > 0), ("control", r.syncs > r.copies), ("merge", target.merge_copy_streams)}
        seen |= {("lanes", target.copy_streams), ("threads", target.launch_threads), ("streams", streams)}
        seen |= {("overhead", target.op_overhead_us > 0), ("contention", target.launch_contention)}
        seen |= {("passthrough", not all(cm.kernel)), ("neutral kernel", any(map(min, zip(cm.kernel, cm.neutral))))}
    for flag in ("copies", "control", "merge", "overhead", "passthrough", "neutral kernel"):
        assert (flag, True) in seen, flag
    assert {("lanes", k) for k in (0, 1, 2)} <= seen
    assert {("threads", k) for k in (1, 2, 3, 4)} <= seen
    assert {("streams", k) for k in range(1, 9)} <= seen
    assert {("contention", c) for c in (0.0, 0.25, 0.5, 1.0)} <= seen


def hosts():
    """The product's targets and hosts that switch the loop's options on."""
    v100 = TARGETS["v100"]
    return [
        v100,
        TARGETS["h100"],
        replace(v100, merge_copy_streams=True),
        replace(v100, copy_streams=2, launch_threads=2, launch_contention=1.0),
        replace(v100, copy_streams=0, launch_threads=1, op_overhead_us=0.0, partition_overhead_us=0.0),
    ]


def partitions(view, model, cm, streams, seed):
    """Plans of the rules, and random placements of the nodes."""
    plans = [{}]
    for policy in ("chains", "auto"):
        plans.append(make_plan(view, PlanOptions(streams=streams, policy=policy), model, cm).partition)
    rng = random.Random(seed)
    keys = sorted({k for k in cm.tasks.key} | {c for c, _ in cm.tasks.instances[1:]})
    plans.append({k: rng.randrange(streams) for k in keys})
    plans.append({k: rng.randrange(streams) for k in keys if rng.random() < 0.5})
    return plans


@pytest.mark.parametrize("name", ["deepfm_tf2", "towers_tf2", "stage_tf1", "bilinear_tf1", "deepfm_tf1"])
def test_sample_models_simulate_to_the_same_floats(sample_cost, name):
    model, view, base = sample_cost(name, target="v100", batch_size=8)
    for k, target in enumerate(hosts()):
        cm = base.with_target(target)
        for streams in (2, 4):
            for partition in partitions(view, model, cm, streams, k * 10 + streams):
                r = simulate(view, partition, streams, cm)
                expected = reference.run(cm, streams, streams_of(cm, partition), True)
                assert_same(r, expected)
        assert cm.single_stream_us() == reference.run(cm, 1, [0] * len(cm), False)["makespan"]


def reference_loop(cm, base, streams, concurrency_, lanes, count):
    replicas = reference.Copies(cm, count)
    loop = reference.Requests(base, cm.pred_count(), count, concurrency_, streams, cm.target.partition_overhead_us)
    stream_of = [s + (r % lanes) * streams for r in range(count) for s in base]
    reference.run(replicas, lanes * streams, stream_of, False, requests=loop)
    return loop


@pytest.mark.parametrize("seed", range(40))
def test_requests_in_flight_on_random_graphs_issue_and_finish_at_the_same_times(seed):
    rng = random.Random(seed)
    cm = random_cost_model(2000 + seed, size=rng.randint(2, 60))
    streams, c, lanes = rng.randint(1, 4), rng.choice((1, 2, 3, 8)), rng.randint(1, 3)
    count = rng.choice((2 * c + 1, 4 * c))
    base = random_streams(cm, streams, seed)
    expected = reference_loop(cm, base, streams, c, lanes, count)
    loop = concurrency.closed_loop(concurrency._Copies(cm, count), base, streams, c, lanes)
    assert loop.issued == expected.issued
    assert loop.finished == expected.finished


def test_requests_in_flight_on_a_sample_model_give_the_same_figures(sample_cost):
    model, view, cm = sample_cost("deepfm_tf2", target="h100", batch_size=64)
    plan = make_plan(view, PlanOptions(streams=2, policy="chains"), model, cm).partition
    base = streams_of(cm, plan)
    busy_pool = replace(cm.target, launch_contention=1.0, launch_threads=2)  # executors queue for the 2 threads
    for target, c, lanes in ((cm.target, 1, 1), (cm.target, 8, 3), (busy_pool, 2, 2), (busy_pool, 3, 1)):
        other = cm.with_target(target)
        expected = reference_loop(other, base, 2, c, lanes, 4 * c)
        figures = concurrency.load(other, plan, 2, c, lanes)
        assert figures == concurrency._figures(expected, other.batch_size)
        loop = concurrency.closed_loop(concurrency._Copies(other, 4 * c), base, 2, c, lanes)
        assert (loop.issued, loop.finished) == (expected.issued, expected.finished)


def test_a_stalled_run_is_reported_as_the_reference_reports_it():
    cm = random_cost_model(7, size=20, layer_width=4)
    cm.tasks.control[3].append(10)  # a cycle: 3 waits for 10, which waits for 3
    cm.tasks.inputs[10].append((3, 0))
    cm._succ = cm._preds = None
    with pytest.raises(RuntimeError, match="stalled") as compiled:
        _run(cm, 2, [0] * len(cm), False)
    with pytest.raises(RuntimeError, match="stalled") as plain:
        reference.run(cm, 2, [0] * len(cm), False)
    assert str(compiled.value) == str(plain.value)


def test_import_msopt_and_inspect_do_not_load_the_compiler(tmp_path):
    """numba costs about half a second to import: commands that do not simulate never pay it."""
    code = (
        "import sys\nimport msopt\nassert 'numba' not in sys.modules, 'import msopt loaded numba'\n"
        "from click.testing import CliRunner\nfrom msopt.cli import main\n"
        f"result = CliRunner().invoke(main, ['inspect', {str(SAMPLES / 'deepfm_tf2')!r}])\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'numba' not in sys.modules, 'msopt inspect loaded numba'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
