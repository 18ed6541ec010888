"""msopt tune on logical CPU devices: a deliberately slower plan is measured slower and not chosen, a plan whose
outputs differ is discarded, and bad input (budget, streams, nothing verifying) ends cleanly."""

import json

import numpy as np
import pytest

from msopt.tune.choose import choose

pytestmark = pytest.mark.tf

SLOW_RULES = 'rules:\n  - name: split constants\n    match: "k/mm_[0-9]*[13579]"\n    stream: 1\n'
DIFFER_RULES = 'rules:\n  - name: join the add tree\n    match: "add_.*"\n    stream: 0\n'


def build_model(path, random=False):
    """A frozen graph with two parts (or, with ``random``, an unseeded random op).

    ``out``: x @ (w0 @ w1 @ ... @ w29), a chain of constant 256x256 matmuls that grappler's constant
    folding computes once, when the graph is optimized, while it sits on one device (measured on this
    machine: about 0.5 ms a step on one stream; 4 ms with any op of the model on the second device;
    8 ms with the chain alternating between the two devices). ``res``: (tanh(x2) + b) + y, whose last
    Add the model's author pinned to the second CPU. Grappler's arithmetic optimizer regroups an Add
    tree only while its Adds share a device, so a plan that brings the two Adds onto one device makes
    the float32 sum round differently from the original: an honest plan whose outputs differ.
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [8, 256], name="x")
        if random:
            tf.add(x, tf.random.uniform([8, 256]), name="noisy")  # no seed: every Session draws other values
        else:
            c = tf.constant(rng.standard_normal((256, 256)).astype(np.float32) / 16, name="k/w0")
            for i in range(30):
                w = tf.constant(rng.standard_normal((256, 256)).astype(np.float32) / 16, name=f"k/w_{i}")
                c = tf.matmul(c, w, name=f"k/mm_{i}")
            tf.matmul(x, c, name="out")

            def known(name):
                return tf.reshape(v1.placeholder(tf.float32, [64, 64], name=name), [64, 64], name=f"{name}_known")

            b = tf.constant(rng.standard_normal(64).astype(np.float32), name="b")
            biased = tf.add(tf.tanh(known("x2"), name="f"), b, name="add_bias")
            with tf.device("/device:CPU:1"):  # as its author exported it: the last Add pinned to the second CPU
                tree = tf.add(biased, known("y"), name="add_res")
            tf.identity(tree, name="res")  # a fetched node is kept as it is: the Add tree must feed another op
    path.write_bytes(graph.as_graph_def().SerializeToString())
    return path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from tests.conftest import run_msopt

    tmp = tmp_path_factory.mktemp("tune")
    model = build_model(tmp / "model.pb")
    (tmp / "slow.yaml").write_text(SLOW_RULES)
    (tmp / "differ.yaml").write_text(DIFFER_RULES)
    out = tmp / "tuned.pb"
    done = run_msopt(
        "tune", model, "--streams", "2", "--rules", tmp / "slow.yaml", "--rules", tmp / "differ.yaml",
        "--rounds", "3", "--steps", "8", "--max-candidates", "5", "-o", out, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return model, out, json.loads(done.stdout), tmp


def rows_of(doc):
    return {row["label"]: row for row in doc["candidates"]}


@pytest.mark.slow  # one tune of a few candidates: about a minute on two shared cores
def test_a_plan_that_stops_constant_folding_is_measured_slower_and_not_chosen(tuned):
    model, out, doc, tmp = tuned
    rows = rows_of(doc)
    slow = rows[f"rules {tmp / 'slow.yaml'}"]
    assert slow["verified"] and slow["measured"] and slow["streams_used"] == 2
    chosen = rows[doc["chosen"]]
    assert doc["chosen"] != slow["label"] and chosen["verified"]
    assert slow["measured"]["median_ms"] > chosen["measured"]["median_ms"]
    assert slow["measured"]["median_ms"] > rows["one stream"]["measured"]["median_ms"]
    for row in rows.values():  # every measured row carries its simulated time and the ratio of the two
        if row["measured"]:
            assert row["simulated_ms"] > 0 and row["measured_over_simulated"] > 0
            assert row["measured"]["spread_ms"] >= 0 and row["measured"]["steps"] == 3 * 8
    assert doc["device"]["type"] == "cpu" and "do not predict" in doc["device"]["note"]


@pytest.mark.slow  # one tune of a few candidates: about a minute on two shared cores
def test_the_chosen_output_verifies_and_its_costs_and_report_are_written(tuned):
    from tests.conftest import run_msopt

    model, out, doc, tmp = tuned
    assert doc["output"] == str(out) and out.exists()
    costs = json.loads((tmp / "tuned.pb.costs.json").read_text())
    assert costs["unit"] == "us" and costs["ops"] and doc["profile"]["path"] == str(tmp / "tuned.pb.costs.json")
    assert json.loads((tmp / "tuned.pb.tune.json").read_text())["chosen"] == doc["chosen"]
    done = run_msopt(
        "run", out, "--streams", "2", "--device", "cpu", "--iterations", "2", "--records", "2", "--compare-to", model
    )
    assert done.returncode == 0, done.stderr
    assert "identical" in done.stdout


@pytest.mark.slow  # one tune of a few candidates: about a minute on two shared cores
def test_a_plan_whose_outputs_differ_is_discarded(tuned):
    model, out, doc, tmp = tuned
    differ = rows_of(doc)[f"rules {tmp / 'differ.yaml'}"]
    assert differ["verified"] is False and differ["measured"] is None
    assert 0 < differ["max_abs_diff"] < 1e-3 and "differ" in differ["discarded"]
    assert any("arithmetic optimizer" in row["why"] for row in differ["differences"])  # the cause, named
    assert doc["chosen"] != differ["label"]


def test_no_candidate_verifying_is_exit_1_and_writes_nothing(tmp_path, msopt):
    model = build_model(tmp_path / "random.pb", random=True)
    done = msopt("tune", model, "--streams", "2", "--rounds", "1", "--steps", "2", "-o", tmp_path / "out.pb")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("msopt: error: no candidate verified") and len(done.stderr.splitlines()) == 1
    assert "NO: outputs differ" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["random.pb"]


def test_a_budget_too_small_for_one_round_is_bad_input_and_writes_nothing(tmp_path, msopt):
    model = build_model(tmp_path / "model.pb")
    done = msopt("tune", model, "--streams", "2", "--budget", "0.5", "-o", tmp_path / "out.pb")
    assert done.returncode == 2, done.stderr
    assert "--budget 0.5 s is too small for one measuring round" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "nothing written" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pb"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--streams", "0"], "Invalid value for '--streams'"),
        (["--streams", "two"], "Invalid value for '--streams'"),
        ([], "Missing option '--streams'"),
        (["--streams", "2", "--budget", "-1"], "Invalid value for '--budget'"),
        (["--streams", "2", "--lanes", "0"], "Invalid value for '--lanes'"),
        (["--streams", "2", "--lanes", "two"], "Invalid value for '--lanes'"),
        (["--streams", "2", "--lanes", "2", "--concurrency", "0"], "Invalid value for '--concurrency'"),
        (["--streams", "8", "--lanes", "200"], "--lanes 200 x --streams 8 = 1600 devices: at most 1024"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path, msopt, args, message):
    done = msopt("tune", "sample_models/linreg_tf1", *args, "-o", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.startswith("msopt: error:") and message in done.stderr
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "out").exists()


def row(label, streams, median, spread, verified=True):
    return {
        "label": label,
        "streams_used": streams,
        "verified": verified,
        "measured": {"median_ms": median, "spread_ms": spread},
    }


def test_a_multi_stream_plan_must_beat_one_stream_by_more_than_the_spread():
    assert choose([row("one stream", 1, 10.0, 0.5), row("auto on 2 streams", 2, 9.8, 0.5)])[0] == "one stream"
    label, why = choose([row("one stream", 1, 10.0, 0.5), row("auto on 2 streams", 2, 8.0, 0.5)])
    assert label == "auto on 2 streams" and "more than the spread" in why
    label, why = choose([row("one stream", 1, 10.0, 0.5), row("auto on 2 streams", 2, 9.8, 0.1, verified=False)])
    assert label == "one stream"


def test_rounds_stop_at_a_round_boundary_when_the_budget_is_spent():
    import time

    from msopt.tune.measure import run_rounds

    steps = {"a": lambda: time.sleep(0.002), "b": lambda: time.sleep(0.004)}
    done = run_rounds(steps, 100_000, 3, deadline=time.perf_counter() + 0.3)
    assert done.stopped == "budget" and 1 <= done.rounds < 100_000
    assert len(done.samples["a"]) == len(done.samples["b"]) == 3 * done.rounds  # complete rounds only


def test_ctrl_c_in_a_round_keeps_the_complete_rounds_only():
    from msopt.tune.measure import run_rounds

    calls = []

    def b():
        calls.append(1)
        if len(calls) == 7:  # Ctrl-C in the middle of the third round
            raise KeyboardInterrupt

    done = run_rounds({"a": lambda: None, "b": b}, 10, 3)
    assert done.stopped == "interrupted" and done.rounds == 2
    assert len(done.samples["a"]) == len(done.samples["b"]) == 6


def _drain(master):
    """What is left to read on a pty's master side (the process writing to it has ended)."""
    import os
    import select

    got = b""
    while select.select([master], [], [], 0.5)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: no writer is left
            break
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.slow  # one tune of a few candidates: about a minute on two shared cores
def test_ctrl_c_while_measuring_writes_the_best_verified_candidate_whole(tmp_path):
    """On a terminal (stderr a pty: progress lines and the bar show), Ctrl-C once the rounds run: exit 130,
    the chosen model, its costs and the report all written, the report saying why it stopped."""
    import os
    import pty
    import signal
    import subprocess
    import sys
    import time

    model = build_model(tmp_path / "model.pb")
    master, slave = pty.openpty()
    out = tmp_path / "out.pb"
    command = [sys.executable, "-m", "msopt", "tune", str(model), "-n", "2", "--max-candidates", "2"]
    command += ["--rounds", "100000", "--steps", "2", "-o", str(out), "--json"]  # within the cap on steps
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=slave, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    )
    os.close(slave)
    seen = b""
    try:
        while b"measuring" not in seen and proc.poll() is None:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        assert b"measuring" in seen, seen.decode(errors="replace")
        time.sleep(3)  # a few rounds (each a few milliseconds) complete meanwhile
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=120)
        seen += _drain(master)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 130, seen.decode(errors="replace")[-3000:]  # what msopt said on its terminal
    doc = json.loads(stdout)
    assert doc["rounds"]["stopped"] == "interrupted" and doc["rounds"]["done"] >= 1
    assert "Ctrl-C stopped the rounds" in doc["why"] and out.exists()
    assert json.loads((tmp_path / "out.pb.tune.json").read_text())["chosen"] == doc["chosen"]
    assert json.loads((tmp_path / "out.pb.costs.json").read_text())["ops"]
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]  # no half-written box left


def test_the_models_own_stream_plan_is_a_candidate(tmp_path, msopt, sample):
    """linreg_tf1 carries DeepRec-style _stream_id attributes: that plan is measured next to msopt's own."""
    model = sample("linreg_tf1")
    (tmp_path / "rules.yaml").write_text("rules:\n  - match: Y\n    stream: 1\n")
    args = ["-n", "2", "--rounds", "1", "--steps", "2", "--rules", "rules.yaml", "-o", "out", "--json"]
    done = msopt("tune", model.name, *args, cwd=tmp_path)  # relative paths: the runners work elsewhere
    assert done.returncode == 0, done.stderr
    assert (
        (tmp_path / "out").is_dir() and (tmp_path / "out.tune.json").exists() and (tmp_path / "out.costs.json").exists()
    )
    own = rows_of(json.loads(done.stdout))["the model's own _stream_id"]
    assert own["kind"] == "model" and own["verified"] and own["streams_used"] == 2 and own["measured"]["steps"] == 2


def test_a_gpu_asked_where_tensorflow_sees_none_is_bad_input(tmp_path, msopt):
    done = msopt("tune", "sample_models/linreg_tf1", "-n", "2", "--device", "gpu", "-o", tmp_path / "out")
    assert done.returncode == 2 and "TensorFlow sees no GPU" in done.stderr and len(done.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_model_that_is_not_a_graph_is_refused_before_tensorflow_loads(tmp_path, msopt):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\xff\xfe not a protocol buffer")
    done = msopt("tune", bad, "-n", "2", "-o", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.startswith("msopt: error:") and "bad.pb" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["bad.pb"]


@pytest.fixture(scope="module")
def tuned_lanes(tmp_path_factory):
    """deepfm_tf2 (TF2: shared weights per lane if the chosen plan has one stream) tuned with --lanes 2 --concurrency 2."""
    import shutil

    from tests.conftest import SAMPLES, run_msopt

    tmp = tmp_path_factory.mktemp("tune_lanes")
    model = tmp / "deepfm_tf2"
    shutil.copytree(SAMPLES / "deepfm_tf2", model)
    out = tmp / "tuned"
    done = run_msopt(
        "tune", model, "-n", "2", "--lanes", "2", "--concurrency", "2", "--rounds", "2", "--steps", "3",
        "--max-candidates", "3", "-o", out, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return model, out, json.loads(done.stdout), tmp


@pytest.mark.slow  # one tune with lanes: about half a minute on two shared cores
def test_lane_counts_are_candidates_verified_and_measured_under_concurrent_clients(tuned_lanes):
    model, out, doc, tmp = tuned_lanes
    lanes = doc["lanes"]
    assert lanes["plan"] == doc["chosen"] and lanes["concurrency"] == 2 and lanes["figure"] == "records_per_s"
    rows = {row["lanes"]: row for row in lanes["candidates"]}
    assert sorted(rows) == [1, 2]
    for row in rows.values():
        assert set(doc["candidates"][0]) <= set(row)  # reported with the plans' keys
        assert row["kind"] == "lanes" and row["concurrency"] == 2 and row["verified"] and row["max_abs_diff"] == 0
        assert row["pinned"]  # every lane's compute ops on its own device
        # the chosen plan is measured, so it may need 2 streams; one loaded object serves every lane only on 1 stream
        assert row["weights"] == ("shared" if row["streams"] == 1 else "copy")
        assert row["measured"]["steps"] == 2 * 3 * 2 and row["measured"]["records_per_s"]["median"] > 0
    assert lanes["chosen"] in {row["label"] for row in rows.values()}
    chosen = next(row for row in rows.values() if row["label"] == lanes["chosen"])
    assert f"--lanes {chosen['lanes']} --concurrency 2" in doc["deploy"]["lanes"]
    assert json.loads((tmp / "tuned.tune.json").read_text())["lanes"]["chosen"] == lanes["chosen"]


@pytest.mark.slow  # one tune with lanes: about half a minute on two shared cores
def test_the_fitted_host_profile_is_written_and_read_by_simulate_and_partition(tuned_lanes):
    from tests.conftest import run_msopt

    model, out, doc, tmp = tuned_lanes
    fit = doc["host_fit"]
    path = tmp / "tuned.host_profile.json"
    assert doc["host_profile"] == str(path) and path.exists()
    profile = json.loads(path.read_text())
    assert profile["op_overhead_us"] == fit["fitted"]["op_overhead_us"] and "not a GPU" in profile["comment"]
    assert fit["points"] == sum(1 for row in doc["candidates"] if row["measured"])
    assert fit["residual_rms_log"] >= 0 and fit["error_after"] <= fit["error_before"] + 1e-9
    done = run_msopt("simulate", model, "-n", "2", "--host-profile", path, "--json")
    assert done.returncode == 0, done.stderr
    host = json.loads(done.stdout)["host"]
    assert host["op_overhead_us"] == profile["op_overhead_us"] and host["launch_threads"] == profile["launch_threads"]
    done = run_msopt("partition", model, "-n", "2", "--host-profile", path, "-o", tmp / "partitioned")
    assert done.returncode == 0, done.stderr


def test_the_fit_recovers_host_constants_that_generated_the_times(sample_view):
    """Times simulated with known host constants: the fit finds constants that explain them, and beats the defaults."""
    import os
    from dataclasses import replace

    from msopt.planning.plan import CostOptions, build_cost_model
    from msopt.simulator.simulate import simulate
    from msopt.tune.candidates import plan_candidates
    from msopt.tune.fit import fit_host

    model, view = sample_view("towers_tf1")
    candidates, _, cost_model = plan_candidates(view, model, 3, CostOptions(batch_size=8), limit=6)
    assert any(c.streams_used > 1 for c in candidates)
    truth = build_cost_model(view, model, CostOptions(batch_size=8))
    threads = max(os.cpu_count() or 1, 3)  # as the fit takes it: the host's logical CPUs, at least the streams
    truth.target = replace(
        truth.target, op_overhead_us=7.0, partition_overhead_us=300.0, launch_contention=0.6, launch_threads=threads
    )
    points = [(c, simulate(view, c.partition, c.streams, truth).makespan_us / 1000) for c in candidates]
    fit = fit_host(view, cost_model, points)
    assert fit["residual_rms_log"] < 0.05 and fit["error_after"] < 0.05 < fit["error_before"]
    assert abs(fit["fitted"]["launch_contention"] - 0.6) < 0.2 and abs(fit["fitted"]["op_overhead_us"] - 7) < 2
    assert set(fit["fitted"]) == {"op_overhead_us", "partition_overhead_us", "launch_contention"}


def lane_row(lanes, records_per_s, spread, median_ms=1.0):
    return {
        "label": f"{lanes} lanes",
        "lanes": lanes,
        "verified": True,
        "measured": {
            "median_ms": median_ms,
            "spread_ms": 0.1,
            "records_per_s": {"median": records_per_s, "spread": spread},
        },
    }


def test_more_lanes_must_beat_one_lane_by_more_than_the_spread():
    from msopt.tune.choose import choose_lanes

    assert choose_lanes([lane_row(1, 1000, 50), lane_row(2, 1040, 50)], 4)[0] == "1 lanes"
    label, why = choose_lanes([lane_row(1, 1000, 50), lane_row(2, 1500, 50)], 4)
    assert label == "2 lanes" and "more than the spread" in why
    assert choose_lanes([lane_row(1, 1000, 5, 2.0), lane_row(2, 500, 5, 1.0)], 1)[0] == "2 lanes"  # C = 1: latency
