"""msopt run --concurrency/--lanes: every lane on its own logical CPU device, every response bitwise checked."""

import json
import subprocess
import sys

import pytest
from conftest import SAMPLES, run_msopt

from msopt.lanes.load import drive

pytestmark = pytest.mark.tf


def run_json(*args, code=0):
    done = run_msopt("run", *args, "--json")
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout) if code == 0 else done


def scale_model(path, factor):
    """A TF2 SavedModel y = x * w + embedding lookup, built by TensorFlow in a fresh process."""
    script = f"""
import tensorflow as tf
class M(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.fill([4], {factor}.0))
        self.table = tf.Variable(tf.reshape(tf.range(40, dtype=tf.float32), [10, 4]) * {factor})
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int64)])
    def serve(self, x, ids):
        return {{"y": x * self.w + tf.gather(self.table, tf.math.floormod(ids, 10))}}
m = M()
tf.saved_model.save(m, {str(path)!r}, signatures={{"serving_default": m.serve}})
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    return path


def assert_every_lane_pinned(doc, lanes, streams=1):
    executed = doc["executed"]["lane_to_device"]
    assert sorted(executed, key=int) == [str(k) for k in range(lanes)]
    for k in range(lanes):
        own = [f"/device:CPU:{k * streams + s}" for s in range(streams)]
        assert executed[str(k)]["devices"] == own
        assert executed[str(k)]["pinned"], executed[str(k)]
        assert set(executed[str(k)]["ops"]) <= set(own) and executed[str(k)]["ops"]
    assert sum(doc["requests_per_lane"].values()) == doc["steps"]
    assert all(n > 0 for n in doc["requests_per_lane"].values())


def test_shared_weights_lanes_pin_compute_and_leave_variable_reads_on_the_variables_device():
    doc = run_json(
        SAMPLES / "deepfm_tf2",
        "--device",
        "cpu",
        "--concurrency",
        4,
        "--lanes",
        3,
        "--records",
        3,
        "--iterations",
        30,
        "--warmup",
        1,
        "--compare-to",
        SAMPLES / "deepfm_tf2",
    )
    assert (doc["lanes"], doc["concurrency"], doc["weights"]["mode"], doc["weights"]["copies"]) == (3, 4, "shared", 1)
    assert_every_lane_pinned(doc, 3)
    for k in range(3):  # one loaded object: its variables live on the first device, read from every lane
        assert set(doc["executed"]["lane_to_device"][str(k)]["variable_reads"]) == {"/device:CPU:0"}
    assert doc["compare"]["ok"] and doc["compare"]["responses"] == 30
    assert doc["throughput"]["records_per_s"] > 0 and doc["latency_ms"]["p99"] >= doc["latency_ms"]["p50"]


def test_copied_weights_put_each_lanes_variables_on_its_own_device():
    doc = run_json(
        SAMPLES / "deepfm_tf2",
        "--device",
        "cpu",
        "-c",
        2,
        "--lanes",
        2,
        "--lane-weights",
        "copy",
        "--iterations",
        10,
        "--warmup",
        1,
        "--compare-to",
        SAMPLES / "deepfm_tf2",
    )
    assert_every_lane_pinned(doc, 2)
    for k in range(2):
        assert set(doc["executed"]["lane_to_device"][str(k)]["variable_reads"]) == {f"/device:CPU:{k}"}
    weights = doc["weights"]
    assert weights["copies"] == 2 and weights["bytes_total"] == 2 * weights["bytes_per_copy"] > 0
    assert doc["compare"]["ok"]


def test_lanes_times_streams_on_a_tf1_model_split_into_two_streams(tmp_path):
    out = tmp_path / "towers_ms2"
    done = run_msopt("partition", SAMPLES / "towers_tf1", "-n", 2, "--policy", "towers", "-o", out)
    assert done.returncode == 0, done.stderr
    doc = run_json(
        out, "--device", "cpu", "-c", 3, "--lanes", 2, "--iterations", 12, "--compare-to", SAMPLES / "towers_tf1"
    )
    assert doc["devices"] == [f"/device:CPU:{k}" for k in range(4)]
    assert_every_lane_pinned(doc, 2, streams=2)
    for k in range(2):  # both of the lane's streams ran
        assert set(doc["executed"]["lane_to_device"][str(k)]["ops"]) == {
            f"/device:CPU:{2 * k}",
            f"/device:CPU:{2 * k + 1}",
        }
        reads = doc["executed"]["lane_to_device"][str(k)]["variable_reads"]  # each lane's own copy
        assert reads and set(reads) <= {f"/device:CPU:{2 * k}", f"/device:CPU:{2 * k + 1}"}
    assert doc["weights"]["mode"] == "copy" and doc["compare"]["ok"]


def test_a_response_that_differs_fails_the_run(tmp_path):
    two, three = scale_model(tmp_path / "two", 2), scale_model(tmp_path / "three", 3)
    done = run_json(two, "--device", "cpu", "-c", 2, "--lanes", 2, "-k", 6, "--compare-to", three, code=1)
    assert "outputs differ" in done.stderr
    doc = run_json(two, "--device", "cpu", "-c", 2, "--lanes", 2, "-k", 6, "--compare-to", two)
    assert doc["compare"]["ok"] and doc["compare"]["responses"] == 6
    assert_every_lane_pinned(doc, 2)


def test_concurrency_one_without_lanes_is_the_plain_run():
    doc = run_json(SAMPLES / "linreg_tf2", "--device", "cpu", "--concurrency", 1, "-k", 5)
    assert "lanes" not in doc and "requests_per_lane" not in doc and doc["steps"] == 5


@pytest.mark.parametrize(
    "args, says",
    [
        (["--lanes", 0], "--lanes"),
        (["--concurrency", 0], "--concurrency"),
        (["--lanes", 256, "--streams", 5], "1280 devices"),
        (["--lanes", 2, "--lane-weights", "shared", "--streams", 2], "--lane-weights shared"),
        (["--lanes", 2, "--trace", "TRACE"], "--trace"),
    ],
)
def test_bad_lane_options_get_one_line_and_exit_2(tmp_path, args, says):
    args = [str(tmp_path / "t.json") if a == "TRACE" else a for a in args]
    done = run_msopt("run", SAMPLES / "linreg_tf2", "--device", "cpu", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msopt: error: ") and says in lines[0], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_drive_spreads_requests_over_lanes_and_keeps_each_response():
    seen = []

    def step(lane, record):
        return lambda: seen.append((lane, record)) or {"lane": lane, "record": record}

    steps = [[step(k, r) for r in range(3)] for k in range(4)]
    result = drive(steps, 25, 5, keep_outputs=True)
    assert result["per_lane"] == {"0": 7, "1": 6, "2": 6, "3": 6}
    assert sorted(seen) == sorted((i % 4, i % 3) for i in range(25))
    assert [r[0] for r in result["responses"]] == [i % 3 for i in range(25)]
    assert all(r[1] == {"lane": i % 4, "record": i % 3} for i, r in enumerate(result["responses"]))
