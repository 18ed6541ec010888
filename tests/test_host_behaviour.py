"""The host fact the simulator relies on, checked on TensorFlow's executor: one device's cheap ops run one thread at a time.

TensorFlow runs one executor per device partition; logical CPU devices take the same executor
code as virtual GPUs. An op that becomes ready from a synchronous op and is inexpensive (every
GPU kernel is) runs inline on the thread that made it ready. The probe (bench/host_behaviour.py)
runs 20 independent cheap ops per device behind one root, reads the executor's per-node log
(thread id, timestamp, device) and counts, per step and device, how many threads ran that
device's ops at overlapping times. Counting, not timing: no figure here depends on the
machine's speed.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import host_behaviour  # noqa: E402

pytestmark = pytest.mark.tf


def test_overlap_counting_sees_concurrent_threads():
    """The counter itself: interleaved spans of two threads on one device count 2, back-to-back spans 1."""
    # (step, device, thread, microseconds)
    interleaved = [("s", 0, 1, 0.0), ("s", 0, 2, 1.0), ("s", 0, 1, 2.0), ("s", 0, 2, 3.0)]
    back_to_back = [("s", 0, 1, 0.0), ("s", 0, 1, 1.0), ("s", 0, 2, 2.0), ("s", 0, 2, 3.0)]
    two_devices = [("s", 0, 1, 0.0), ("s", 1, 2, 0.5), ("s", 0, 1, 1.0), ("s", 1, 2, 1.5)]
    assert host_behaviour.thread_facts(interleaved)["per_device"][0]["max_concurrent_threads"] == 2
    assert host_behaviour.thread_facts(back_to_back)["per_device"][0]["max_concurrent_threads"] == 1
    facts = host_behaviour.thread_facts(two_devices)
    assert [facts["per_device"][d]["max_concurrent_threads"] for d in (0, 1)] == [1, 1]
    assert facts["max_concurrent_threads_all_devices"] == 2


def test_log_line_parsing():
    """The executor's log line format of TensorFlow 2.21 (VLOG(1) in ExecutorState::ProcessInline)."""
    text = "\n".join(
        [
            "MEASURE 20",
            "I0000 00:00:1795460815.336049   21165 executor.cc:879] Process node: 10 step -67 "
            '{{node d1_op3}} = Mul[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/device:CPU:1"](x, x) '
            "device: /job:localhost/replica:0/task:0/device:CPU:1",
            "I0000 00:00:1795460815.336059   21165 executor.cc:879] Process node: 14 step -67 "
            "{{node x/_1}} = _Send[T=DT_FLOAT](x) device: /job:localhost/replica:0/task:0/device:CPU:0",
            "END 20",
        ]
    )
    assert host_behaviour.parse_log(text) == [("-67", 1, 21165, pytest.approx(1795460815.336049e6))]


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2])
def test_one_thread_at_a_time_per_device(devices):
    """1 device and 2 devices, inter-op pool of 2: each device's cheap ops run on one thread at a time."""
    facts = host_behaviour.trace(devices, inter_op=2, shape="local", weight="cheap", ops=20, warmup=200, steps=12)
    assert facts["steps"] >= 10 and facts["ops_seen"] >= 10 * 20 * devices
    assert sorted(facts["per_device"]) == list(range(devices))
    for device, seen in facts["per_device"].items():
        # The rule, step by step. A step where the executor's running cost estimate of an op jumped
        # above its inline threshold (a preempted op on a loaded machine) dispatches that op to the pool:
        # allow one such step in the run; the typical step must be single-threaded.
        assert seen["median_concurrent_threads"] == 1, (device, facts)
        assert seen["steps_on_one_thread_at_a_time"] >= facts["steps"] - 1, (device, facts)
