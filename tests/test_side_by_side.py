"""Simulations side by side (msopt.compiled.side_by_side): the compiled event loop releases the GIL, runs ahead come back
in order, a caller stopping early leaves no thread, and the auto search plans the same with one thread or two."""

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from msopt.compiled import side_by_side
from msopt.load import open_model
from msopt.planning.plan import CostOptions, PlanOptions, build_cost_model, make_plan

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"


def _simulation_threads():
    return [t for t in threading.enumerate() if t.name.startswith("msopt-simulate")]


def test_runs_ahead_come_back_in_order_and_an_early_stop_leaves_no_thread():
    started = []

    def square(x):
        started.append(x)
        return x * x

    assert list(side_by_side.ahead(square, range(20), side_by_side.SMALL)) == [x * x for x in range(20)]
    started.clear()
    found = side_by_side.ahead(square, range(1000), side_by_side.SMALL)
    assert [next(found), next(found)] == [0, 1]
    found.close()
    assert len(started) <= 2 + side_by_side.workers()  # a few ahead, not the thousand
    assert not _simulation_threads()


def test_small_runs_stay_in_this_thread_and_large_ones_go_beside_it():
    def where(_):
        return threading.current_thread().name

    assert set(side_by_side.ahead(where, range(4), side_by_side.SMALL - 1)) == {threading.current_thread().name}
    with side_by_side.pool(side_by_side.SMALL - 1) as executor:
        assert executor.submit(where, 0).result() == threading.current_thread().name
    if side_by_side.workers() < 2:
        pytest.skip("one core: every run stays in this thread")
    assert all(name.startswith("msopt-simulate") for name in side_by_side.ahead(where, range(4), side_by_side.SMALL))


def test_an_error_in_a_run_ahead_reaches_the_caller_and_leaves_no_thread():
    def fail_at_three(x):
        if x == 3:
            raise ValueError("three")
        return x

    with pytest.raises(ValueError, match="three"):
        list(side_by_side.ahead(fail_at_three, range(10), side_by_side.SMALL))
    assert not _simulation_threads()


def _chain(n):
    """The compiled event loop's arguments for a chain of ``n`` kernels on one stream."""
    ptr = np.minimum(np.arange(n + 1), n - 1).astype(np.int64)
    dst = np.arange(1, n, dtype=np.int64)
    graph = (ptr, dst, np.zeros(n - 1, np.int64), np.zeros(n - 1, np.int64), np.zeros(n, np.int64),
             np.ones(n, np.bool_), np.zeros(n, np.bool_))  # fmt: skip
    request = (n, 1, np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1))
    host = np.array([3.0, 10.0, 1.0, 0.25, 5.0, 1e6])
    return (graph, np.ones(n), np.full(n, 0.5), np.zeros(n, np.int64), 1, 1, 1, request, 1, host,
            np.array([1, 1, 0], np.int64), False)  # fmt: skip


def test_the_compiled_event_loop_lets_other_threads_run():
    """While one thread is inside the loop (prebuilt or just in time, whichever this process uses), another runs
    Python. The switch interval is made longer than the test, so a thread holding the GIL keeps it until it blocks:
    a loop holding the GIL would let the other thread run only after the loop, when ``left`` is set."""
    from msopt.simulator.event_loop import run

    args = _chain(3_000_000)
    run(*_chain(10))  # compiled (just in time) before the test
    inside, left = threading.Event(), threading.Event()

    def simulate():
        inside.set()
        run(*args)
        left.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        worker = threading.Thread(target=simulate)
        worker.start()
        inside.wait()
        counted = 0
        while not left.is_set():
            counted += 1
            time.sleep(0.001)  # gives the GIL back, for the loop's end
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert counted >= 5, counted


@pytest.mark.parametrize("name", ["deepfm_tf1", "towers_tf2"])
def test_the_auto_search_plans_the_same_with_one_thread_or_two(monkeypatch, name):
    model, view = open_model(SAMPLES / name)
    options = PlanOptions(streams=4, cost=CostOptions(target="h100"))
    monkeypatch.setattr(side_by_side, "SMALL", 0)  # these models' runs are small: side by side anyway
    found = {}
    for most in (1, 2):
        monkeypatch.setattr(side_by_side, "MOST", most)
        cost = build_cost_model(view, model, options.cost)
        result = make_plan(view, options, model, cost)
        found[most] = (result.partition, json.dumps(result.report, sort_keys=True, default=str))
    assert found[1] == found[2]
    assert not _simulation_threads()
