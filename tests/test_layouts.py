"""msopt run --compare-layouts: replicas and lanes at the same concurrency, the same keys, a verdict that follows them."""

import json

import pytest
from conftest import SAMPLES, run_msopt

from msopt.runner.layouts import memory_mb, verdict

pytestmark = pytest.mark.tf


@pytest.mark.slow
def test_replicas_and_lanes_both_run_with_the_same_keys_and_a_consistent_verdict():
    done = run_msopt(
        "run",
        SAMPLES / "deepfm_tf2",
        "--device",
        "cpu",
        "--compare-layouts",
        "--replicas",
        2,
        "--lanes",
        2,
        "--iterations",
        20,
        "--warmup",
        2,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["device_type"] == "cpu" and doc["figures"].startswith("CPU figures")
    assert doc["concurrency"] == 2
    replicas, lanes = doc["layouts"]["replicas"], doc["layouts"]["lanes"]
    assert replicas["processes"] == 2 and len(replicas["per_replica"]) == 2
    assert lanes["processes"] == 1 and sorted(lanes["requests_per_lane"]) == ["0", "1"]
    for layout in (replicas, lanes):
        assert set(layout["throughput"]) == {"steps_per_s", "records_per_s"}
        assert set(layout["latency_ms"]) == {"mean", "p50", "p95", "p99"}
        assert layout["throughput"]["records_per_s"] > 0
        assert all(mb > 0 for mb in layout["memory"]["rss_mb_per_process"])
        assert layout["memory"]["rss_mb_sum"] == pytest.approx(sum(layout["memory"]["rss_mb_per_process"]), abs=0.2)
        assert "summed" in layout["memory"]["label"]
    assert replicas["steps"] == 2 * 20 and lanes["steps"] == 20
    v = doc["verdict"]
    speed = {n: doc["layouts"][n]["throughput"]["records_per_s"] for n in ("replicas", "lanes")}
    memory = {n: doc["layouts"][n]["memory"]["rss_mb_sum"] for n in ("replicas", "lanes")}
    assert v["more_throughput"] == max(speed, key=speed.get)
    assert v["less_memory"] == min(memory, key=memory.get)
    per_gb = {n: speed[n] / memory[n] for n in speed}
    assert v["winner"] == max(per_gb, key=per_gb.get)
    assert v["winner"] in v["reason"]


def layout(records_per_s, rss_mb):
    return {"throughput": {"records_per_s": records_per_s}, "memory": {"rss_mb_sum": rss_mb}}


def test_verdict_names_the_layout_that_is_faster_and_smaller():
    v = verdict({"replicas": layout(100.0, 2000.0), "lanes": layout(150.0, 800.0)})
    assert (v["more_throughput"], v["less_memory"], v["winner"], v["dominates"]) == ("lanes", "lanes", "lanes", True)


def test_verdict_on_a_trade_off_names_more_records_per_gb():
    v = verdict({"replicas": layout(300.0, 2000.0), "lanes": layout(200.0, 1000.0)})
    assert v["more_throughput"] == "replicas" and v["less_memory"] == "lanes"
    assert v["winner"] == "lanes" and not v["dominates"]


def test_memory_on_a_gpu_is_the_largest_per_gpu_peak():
    gpu = {"throughput": {"records_per_s": 1.0}, "memory": {"rss_mb_sum": 9e9, "gpu_peak_mb_per_gpu": {"a": 5, "b": 7}}}
    assert memory_mb(gpu) == 7


@pytest.mark.parametrize(
    "args, message",
    [
        (["--replicas", "2"], "--compare-layouts needs --lanes"),
        (["--replicas", "2", "--lanes", "2", "--concurrency", "3"], "--concurrency 3 differs"),
        (["--replicas", "2", "--lanes", "2", "--stage"], "--stage does not combine with --compare-layouts"),
    ],
)
def test_bad_layout_options_exit_2_with_one_line(args, message):
    done = run_msopt("run", SAMPLES / "deepfm_tf2", "--device", "cpu", "--compare-layouts", *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msopt: error: ") and message in lines[0], done.stderr
