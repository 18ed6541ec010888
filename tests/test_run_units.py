"""The runner's pieces without TensorFlow: the stage pipeline's ordering and blocking, input checks, options."""

import os
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES

from msopt.errors import InputError
from msopt.files.inputs import check_input
from msopt.graph.view import GraphView
from msopt.load import load
from msopt.runner.config import RunConfig
from msopt.runner.devices import parse_priorities, set_visible_gpus
from msopt.runner.placed_model import streams_in
from msopt.runner.stage_pipeline import StageFailed, StagePipeline
from msopt.runner.trace import executed_names

pytestmark = pytest.mark.tf

BIN = Path(__file__).resolve().parent / "bin"


@pytest.mark.parametrize("threads, capacity", [(1, 1), (4, 2), (3, 8)])
def test_pipeline_delivers_every_record_once_in_order(threads, capacity):
    rng = random.Random(threads * 10 + capacity)
    delays = [rng.random() * 0.004 for _ in range(60)]
    in_flight, peak = [0], [0]
    lock = threading.Lock()

    def upstream(i):
        time.sleep(delays[i])  # records finish out of order when threads > 1
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        return i * i

    def downstream(item):
        with lock:
            in_flight[0] -= 1
        return item + 1

    got = []
    stats = StagePipeline(upstream, downstream, threads, capacity).run(60, lambda i, r: got.append((i, r)))
    assert got == [(i, i * i + 1) for i in range(60)]
    assert stats["records"] == 60 and stats["peak_buffered"] <= capacity and peak[0] <= capacity


def test_a_slow_consumer_blocks_the_producers_and_a_slow_producer_blocks_the_consumer():
    slow_down = StagePipeline(lambda i: i, lambda x: time.sleep(0.01), threads=2, capacity=1).run(10)
    assert slow_down["upstream_blocked_s"] > 0.05 and slow_down["downstream_blocked_s"] < 0.05
    slow_up = StagePipeline(lambda i: time.sleep(0.01), lambda x: x, threads=1, capacity=4).run(10)
    assert slow_up["downstream_blocked_s"] > 0.05


def test_an_upstream_failure_names_its_record_and_stops_the_pipeline():
    def upstream(i):
        if i == 5:
            raise ValueError("bad record")
        return i

    seen = []
    with pytest.raises(StageFailed, match="record 5: bad record"):
        StagePipeline(upstream, lambda x: x, threads=2, capacity=2).run(20, lambda i, r: seen.append(i))
    assert seen == list(range(5))


def test_check_input_names_the_input_the_expected_and_the_given():
    spec = {"dtype": "int64", "shape": [None, 3]}
    assert check_input("ids", spec, np.zeros((2, 3), np.int64)).shape == (2, 3)
    with pytest.raises(InputError, match=r"input 'ids': expected dtype int64, given int32"):
        check_input("ids", spec, np.zeros((2, 3), np.int32))
    with pytest.raises(InputError, match=r"input 'ids': expected shape \[\?, 3\], given \[2\]"):
        check_input("ids", spec, np.zeros((2,), np.int64))
    lines = check_input("lines", {"dtype": "string", "shape": [None]}, np.array(["a,b", "c"]))
    assert lines.dtype == object and list(lines) == [b"a,b", b"c"]


def test_priorities_and_visible_gpus(monkeypatch):
    assert parse_priorities("-1", 3) == [-1, -1, -1] and parse_priorities("-1,0", 2) == [-1, 0]
    assert parse_priorities("-5,0", 2) == [-5, 0]
    for bad in ("1", "-6", "0,2"):
        with pytest.raises(InputError, match=f"priority {bad.split(',')[-1]} is outside CUDA's range"):
            parse_priorities(bad, 2)
    with pytest.raises(InputError, match="3 priorities for 2 streams"):
        parse_priorities("0,0,0", 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # recorded, so the value set below is undone after the test
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "")
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    set_visible_gpus("0, 2")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,2" and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    with pytest.raises(InputError, match="GPU indices"):
        set_visible_gpus("first")


def test_gpu_memory_from_nvidia_smi(monkeypatch):
    from msopt.runner.gpu_inventory import memory_mb
    from msopt.runner.mps import list_gpus

    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert memory_mb(1) == [16384] and list_gpus()[0].startswith("GPU 0: Stand-in")
    with pytest.raises(InputError, match="1 GPU.* found by the driver or nvidia-smi, TensorFlow sees 2"):
        memory_mb(2)


def test_worker_configuration_drops_what_only_the_parent_does():
    parent = RunConfig(
        model="m", mps=True, replicas=3, mps_threads=20, iterations=5, device="cpu", gpus="1,2"
    )  # --gpus: the workers inherit CUDA_VISIBLE_DEVICES (by UUID under MPS)
    worker = RunConfig.from_json(parent.for_worker().to_json(), worker_barrier="b", worker_replicas=3)
    assert worker == RunConfig(model="m", iterations=5, device="cpu", worker_barrier="b", worker_replicas=3)


def test_worker_configuration_is_data_only():
    with pytest.raises(InputError, match="fields of RunConfig"):
        RunConfig.from_json('{"model": "m", "__class__": "os.system"}')
    with pytest.raises(InputError, match="not JSON"):
        RunConfig.from_json("model: m")


def test_executed_names_follow_function_calls():
    view = GraphView(load(SAMPLES / "linreg_tf2").graph_def)
    names = executed_names(view)
    wrapper = view.nodes["StatefulPartitionedCall"].calls[0]
    serve = view.nodes[f"{wrapper}:StatefulPartitionedCall"].calls[0]  # the body the signature really calls
    assert names["StatefulPartitionedCall/StatefulPartitionedCall/MatMul_1"] == f"{serve}:MatMul_1"
    assert names["weight_x"] == "weight_x"
    assert streams_in(view) == 2


def test_verify_says_in_one_line_when_it_cannot_trace_the_runs():
    """Explaining a difference is best effort: a trace that fails is reported, not a NameError."""
    from msopt.runner.executable import Executable
    from msopt.runner.verify import executed_differences

    executable = Executable(load(SAMPLES / "linreg_tf1"), 1, "cpu")
    try:
        rows = executed_differences(executable, executable, "no_such_signature", {}, 1)
    finally:
        executable.close()
    assert len(rows) == 1 and rows[0]["node"] is None
    assert rows[0]["why"].startswith("could not trace the runs:") and "no_such_signature" in rows[0]["why"]
