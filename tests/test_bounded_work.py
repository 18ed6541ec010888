"""Bounded work: the simulated requests in flight stay within a stated budget (refused before any simulation when they
would not), tune's candidate set and steps are checked before anything loads, every float option is finite, and
absurd dimensions in a model end as exit 2 naming the field or are ignored, never as an internal error."""

import json
import math

import click
import pytest
from conftest import SAMPLES
from test_bad_input import assert_clean_failure

from msopt.commands.options import FiniteFloat
from msopt.errors import InputError
from msopt.graph import protos
from msopt.planning.plan import PlanOptions, make_plan
from msopt.simulator import concurrency
from msopt.simulator.uncertainty import corner_models
from msopt.tune.config import MAX_LANE_MODELS, MAX_PLANS, MAX_STEPS, TuneConfig

# Generous: these finish in a few seconds; the limit only tells a refusal from a runaway on a loaded machine.
TIMEOUT = 60


def planned(sample_cost, name, streams):
    model, view, cost = sample_cost(name, target="h100", batch_size=8)
    plan = make_plan(view, PlanOptions(streams=streams, policy="auto"), model, cost).partition
    return cost, plan


def counting(monkeypatch):
    """Tasks simulated by msopt.simulator.concurrency from now on: [total] (every load goes through closed_loop)."""
    seen = [0]
    real = concurrency.closed_loop

    def closed_loop(replicas, base, streams, c, lanes):
        seen[0] += replicas.copies * len(base)
        return real(replicas, base, streams, c, lanes)

    monkeypatch.setattr(concurrency, "closed_loop", closed_loop)
    return seen


# Requests in flight (msopt.simulator.concurrency): what is counted is what is simulated, and too much is refused first.


@pytest.mark.parametrize("c, lanes", [(1, 6), (2, 3), (5, 1)])
def test_the_tasks_counted_before_a_report_are_the_tasks_it_simulates(sample_cost, monkeypatch, c, lanes):
    cost, plan = planned(sample_cost, "towers_tf1", 2)
    seen = counting(monkeypatch)
    concurrency.report(cost, plan, 2, c, lanes)
    plans = 2 if len(set(concurrency.streams_of(cost, plan))) > 1 else 1
    concurrencies = set(concurrency.CONCURRENCIES) | {c}
    expected = concurrency.simulated_tasks(len(cost), plans, len(corner_models(cost)), c, lanes, concurrencies)
    assert seen[0] == expected


def test_lanes_beyond_the_requests_simulated_give_the_same_figures(sample_cost):
    """From 4 x C lanes on every simulated request has a lane of its own: the report simulates those once."""
    cost, plan = planned(sample_cost, "deepfm_tf1", 2)
    requests = concurrency.REQUESTS_PER_SLOT * 1
    figures = [concurrency.load(cost, plan, 2, 1, k) for k in (requests, requests + 1, requests + 3)]
    assert figures[0] == figures[1] == figures[2]
    rows = concurrency.table(cost, plan, 2, requests + 3, concurrencies=(1, 2))
    direct = {(c, k): concurrency.load(cost, plan, 2, c, k) for c in (1, 2) for k in range(1, requests + 4)}
    for row in rows:
        figures = direct[(row["concurrency"], row["lanes"])]
        assert row["requests_per_s"] == figures["requests_per_s"] and row["p99_ms"] == figures["latency_ms"]["p99"]


def test_the_report_reuses_loads_without_changing_a_figure(sample_cost):
    cost, plan = planned(sample_cost, "deepfm_tf1", 2)
    doc = concurrency.report(cost, plan, 2, 3, 2)
    for k in (1, 2):
        figures = concurrency.load(cost, plan, 2, 3, k)
        row = next(r for r in doc["table"] if r["concurrency"] == 3 and r["lanes"] == k)
        assert row["requests_per_s"] == figures["requests_per_s"] and row["p50_ms"] == figures["latency_ms"]["p50"]
    assert doc["requests_per_s"] == concurrency.load(cost, plan, 2, 3, 2)["requests_per_s"]


def test_too_much_work_is_refused_before_anything_is_simulated(sample_cost, monkeypatch):
    cost, plan = planned(sample_cost, "deepfm_tf1", 4)
    seen = counting(monkeypatch)
    with pytest.raises(InputError) as refused:
        concurrency.report(cost, plan, 4, 1024, 256)
    assert seen[0] == 0
    message = str(refused.value)
    assert f"at most {concurrency.MAX_SIMULATED_TASKS:,}" in message and "use --lanes 1, or --concurrency" in message
    # What the message offers fits.
    lower = int(message.split("--concurrency ")[-1].split(" or lower")[0])
    concurrency.check_work(cost, 2, lower, 256)
    with pytest.raises(InputError):
        concurrency.check_work(cost, 2, lower + 1, 256)


def test_a_model_too_large_for_one_request_in_flight_says_so(sample_cost, monkeypatch):
    cost, plan = planned(sample_cost, "deepfm_tf1", 2)
    monkeypatch.setattr(concurrency, "MAX_SIMULATED_TASKS", 1000)
    with pytest.raises(InputError, match="too many ops for it: --concurrency 1 --lanes 1 alone simulates"):
        concurrency.report(cost, plan, 2, 1, 1)


@pytest.mark.parametrize(
    "args, way",
    [
        (["-c", 1024, "--lanes", 256], "use --lanes 1, or --concurrency 16 or lower"),
        (["-c", 64, "--lanes", 256], "--lanes 21 or fewer"),
        (["-c", 256, "--lanes", 16], "--lanes 5 or fewer"),
    ],
)
def test_runaway_concurrency_reproducers_are_refused_with_the_limit(msopt, args, way):
    done = msopt("simulate", SAMPLES / "deepfm_tf1", "-n", 4, *args, timeout=TIMEOUT)
    assert_clean_failure(done, "would simulate", f"at most {concurrency.MAX_SIMULATED_TASKS:,}", way)


def test_a_thousand_requests_in_flight_on_one_lane_finish(msopt):
    """More ops waiting for an inter-op thread than threads: the waiting ops queue apart instead of going back to
    the event heap at every launch, so the load is simulated in seconds, not hours."""
    done = msopt("simulate", SAMPLES / "deepfm_tf1", "-n", 4, "-c", 1024, "--lanes", 1, "--json", timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["load"]["requests_simulated"] == 4096


# msopt tune: the candidate set and the steps, before anything loads.


def tune(**options):
    return TuneConfig(**{"model": "m", "streams": 2, "output": "o", **options})


@pytest.mark.parametrize(
    "options, words",
    [
        ({"lanes": 256, "concurrency": 1024}, ["loads the model 32896 times", f"at most {MAX_LANE_MODELS}", "16"]),
        ({"streams": 40}, ["--streams 40 plans 236 candidates", f"at most {MAX_PLANS}", "--streams 22 or fewer"]),
        ({"rounds": 100_000}, [f"at most {MAX_STEPS:,}", "--rounds", "or give a --budget"]),
        ({"warmup": 10**7, "budget": 60.0}, ["(verifying, warming up)", "--warmup"]),
        ({"lanes": 16, "concurrency": 1024}, ["steps and requests", "--lanes, --concurrency"]),
        ({"max_candidates": 10**30}, ["--max-candidates must be at most 32"]),
        ({"records": 10**6}, ["--records must be at most 64"]),
        ({"batch_size": 10**30}, ["--batch-size must be at most 2147483647"]),
    ],
)
def test_a_tune_that_cannot_finish_is_refused_before_it_starts(options, words):
    with pytest.raises(InputError) as refused:
        tune(**options).check()
    for word in words:
        assert word in str(refused.value)


def test_a_long_run_with_a_budget_is_allowed_the_budget_stops_its_rounds():
    tune(rounds=100_000, budget=60.0).check()
    tune().check()  # the defaults
    tune(lanes=16, concurrency=8).check()


def test_the_tune_reproducer_is_refused_before_loading(msopt, tmp_path):
    done = msopt(
        "tune", SAMPLES / "deepfm_tf1", "-n", 2, "--lanes", 256, "-c", 1024, "-o", tmp_path / "out", timeout=TIMEOUT
    )
    assert_clean_failure(done, "--lanes 256 loads the model", "--lanes 16 or fewer")
    assert list(tmp_path.iterdir()) == []


# Numbers on the command line.


def float_options():
    from msopt.cli import COMMANDS, load_command

    for name in COMMANDS:
        for param in load_command(name).params:
            if isinstance(param.type, click.types.FloatParamType):
                yield f"{name} {param.opts[0]}", param.type


def test_every_float_option_is_finite():
    found = dict(float_options())
    assert {"tune --budget", "partition --tolerance", "run --gpu-memory-fraction"} <= set(found)
    for name, kind in found.items():
        assert isinstance(kind, FiniteFloat), name


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999", "-1e999"])
def test_the_finite_float_type_refuses_nan_and_infinities(value):
    with pytest.raises(click.BadParameter, match="not a finite number"):
        FiniteFloat(min=0).convert(value, None, None)
    assert FiniteFloat(0, 1, min_open=True).convert("0.5", None, None) == 0.5
    with pytest.raises(click.BadParameter):
        FiniteFloat(0, 1, min_open=True).convert("0", None, None)


@pytest.mark.parametrize(
    "args, option",
    [
        (["tune", SAMPLES / "linreg_tf1", "-n", 2, "-o", "OUT", "--budget", "nan"], "--budget"),
        (["tune", SAMPLES / "linreg_tf1", "-n", 2, "-o", "OUT", "--budget", "inf"], "--budget"),
        (["partition", SAMPLES / "linreg_tf1", "-n", 2, "-o", "OUT", "--verify", "--tolerance", "nan"], "--tolerance"),
        (["run", SAMPLES / "linreg_tf1", "--gpu-memory-fraction", "nan"], "--gpu-memory-fraction"),
        (["simulate", SAMPLES / "linreg_tf1", "--batch-size", 10**30], "--batch-size"),
        (["simulate", SAMPLES / "linreg_tf1", "-c", 10**30], "--concurrency"),
        (["tune", SAMPLES / "linreg_tf1", "-n", 2, "-o", "OUT", "--max-candidates", 10**30], "--max-candidates"),
    ],
)
def test_nan_infinities_and_huge_numbers_are_one_line_exit_2(msopt, tmp_path, args, option):
    args = [tmp_path / "out" if a == "OUT" else a for a in args]
    assert_clean_failure(msopt(*args, timeout=TIMEOUT), option)
    assert not (tmp_path / "out").exists()


# Dimensions in a model.


def test_implausible_dims():
    assert protos.implausible_dims([-1, 28, 28, 3]) is None
    assert protos.implausible_dims([None, 2**40]) is None
    assert "dimension 1 is 1099511627777" in protos.implausible_dims([-1, 2**40 + 1])
    assert "dimension 0 is -2" in protos.implausible_dims([-2])
    assert "holds more than 2^48 elements" in protos.implausible_dims([2**30, 2**30])
    assert "holds more than 2^48 elements" in protos.implausible_dims([2**40] * 24)


def edit_saved_model(path, change):
    pb = path / "saved_model.pb"
    saved = protos.SavedModel.FromString(pb.read_bytes())
    change(saved.meta_graphs[0])
    pb.write_bytes(saved.SerializeToString())


def set_dims(shape, dims):
    del shape.dim[:]
    for d in dims:
        shape.dim.add().size = d


@pytest.mark.parametrize(
    "name, key, dims, words",
    [
        ("linreg_tf1", "X", [2**62] * 24, ["dimension 0 is 4611686018427387904"]),  # internal_v80: int too large
        ("towers_tf2", "image_0", [-1, 2**63 - 1, 28, 1], ["dimension 1 is 9223372036854775807"]),  # internal_v421
        ("linreg_tf1", "X", [2**30, 2**30], ["[1073741824, 1073741824] holds more than 2^48 elements"]),
    ],
)
def test_an_absurd_signature_dimension_is_exit_2_naming_the_signature_and_field(msopt, sample, name, key, dims, words):
    src = sample(name)

    def change(meta):
        set_dims(meta.signature_def["serving_default"].inputs[key].tensor_shape, dims)

    edit_saved_model(src, change)
    done = msopt("partition", src, "-n", 2, "-o", src.parent / "out", timeout=TIMEOUT)
    assert_clean_failure(done, f"signature 'serving_default' input '{key}'", "tensor_shape", *words)
    assert not (src.parent / "out").exists()


def test_an_absurd_recorded_shape_is_ignored_and_the_shape_propagated(msopt, sample, sample_cost):
    """internal_v311: _output_shapes [2^62] on a MatMul overflowed the byte counts; the hint is ignored instead."""
    src = sample("towers_tf1")
    node = "tower_1/ConvNet/MatMul_1"

    def change(meta):
        found = next(n for n in meta.graph_def.node if n.name == node)
        set_dims(found.attr["_output_shapes"].list.shape[0], [2**62])

    edit_saved_model(src, change)
    _, _, cost = sample_cost(src)
    _, _, plain = sample_cost("towers_tf1")
    i = cost.tasks.key.index(node)
    assert cost.shapes[i] == plain.shapes[i] == [("float", [-1, 10])]  # MatMul of [-1, 32] by [32, 10]
    done = msopt("partition", src, "-n", 2, "-o", src.parent / "out", "--json", timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert (src.parent / "out").exists()


def test_an_element_count_products_overflow_is_capped_not_an_internal_error(msopt, tmp_path):
    """[2^40, 1] x [1, 2^40]: each input is plausible, the MatMul's 2^80 elements would overflow the int64 bytes."""
    graph = protos.GraphDef()

    def node(name, op, inputs=(), dims=None):
        n = graph.node.add(name=name, op=op, input=list(inputs))
        n.attr["dtype" if op == "Placeholder" else "T"].type = 1
        if dims is not None:
            set_dims(n.attr["shape"].shape, dims)

    node("a", "Placeholder", dims=[2**40, 1])
    node("b", "Placeholder", dims=[1, 2**40])
    node("m", "MatMul", ["a", "b"])
    node("r0", "Relu", ["m"])
    node("r1", "Relu", ["m"])
    node("s", "AddV2", ["r0", "r1"])
    path = tmp_path / "product.pb"
    path.write_bytes(graph.SerializeToString())
    done = msopt("simulate", path, "-n", 2, "--policy", "chains", "--json", timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    import json

    doc = json.loads(done.stdout)
    assert 0 < doc["copy_bytes"] <= 2 * 4 * 2**50 and math.isfinite(doc["makespan_ms"])
