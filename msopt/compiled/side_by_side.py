"""Work side by side: the compiled loops release the GIL, so runs that do not depend on each other (the auto
search's list schedules and candidates' simulations, the host corners) go to a second thread while this one goes on.

Two threads at most: a 2-core machine has no room for more, and each event loop over a million tasks holds about
40 MB of its own (the 2 GB target of the million-op plan leaves room for one more loop, not seven).
Every result is the same as run one after another: the runs share only read-only arrays, and results are taken
in the order the runs were asked for.
"""

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

MOST = 2
# Runs of fewer tasks are made in the calling thread: handing a short run to another thread and back, with the GIL
# passed to and fro, costs more than the run itself (bench/RESULTS.md has the figures).
SMALL = 20_000


def workers():
    """How many simulations may run at once: the cores this process may use, at most MOST."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MOST, cores))


def beside(tasks):
    """Whether runs of ``tasks`` tasks go to other threads: on two cores or more, and not small ones."""
    return workers() >= 2 and tasks >= SMALL


class _Now:
    """The executor of a one-core machine: runs each call as it is submitted (no thread)."""

    def submit(self, function, *args, **kwargs):
        future = Future()
        try:
            future.set_result(function(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


@contextmanager
def pool(tasks, threads=None):
    """An executor of ``threads`` threads (``workers()`` if None) for simulations of ``tasks`` tasks each, for the
    ``with`` block; where the machine has one core or the runs are small, one that runs each call when it is
    submitted. Left by an exception (Ctrl-C, or a generator closed early), it drops the runs not yet started and
    waits for the running ones (a compiled loop cannot be stopped), so no thread outlives the block."""
    if not beside(tasks):
        yield _Now()
        return
    executor = ThreadPoolExecutor(max_workers=threads or workers(), thread_name_prefix="msopt-simulate")
    try:
        yield executor
    except BaseException:
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)


def ahead(function, items, tasks):
    """``map(function, items)``, lazily, with up to ``workers()`` calls running ahead (simulations of ``tasks``
    tasks each; none ahead for small ones): a caller that stops early has started at most that many calls it did
    not need."""
    if not beside(tasks):
        yield from map(function, items)
        return
    items = iter(items)
    with pool(tasks) as executor:
        running = deque(executor.submit(function, item) for _, item in zip(range(workers()), items))
        while running:
            result = running.popleft().result()
            for item in items:  # the next call runs while the caller looks at this result
                running.append(executor.submit(function, item))
                break
            yield result
