"""A stage pipeline: the upstream part of a model runs ahead in threads into a bounded, ordered buffer.

Like DeepRec's ``tf.staged`` prefetch, applied to an exported model split at boundary tensors, with
one difference: no record is ever dropped or reordered. A producer may run at most ``capacity``
records ahead of the consumer; when the buffer is full it waits (and that wait is reported) rather
than discarding its record after a timeout. The consumer takes records strictly in order.
"""

import threading
import time


class StageFailed(Exception):
    """The upstream part failed on a record; carries the record index and the original error."""

    def __init__(self, record, error):
        super().__init__(f"upstream part failed on record {record}: {error}")
        self.record = record
        self.error = error


class StagePipeline:
    """``upstream(i) -> item`` in ``threads`` threads feeding ``downstream(item) -> result`` in the caller's thread."""

    def __init__(self, upstream, downstream, threads=1, capacity=1):
        if threads < 1 or capacity < 1:
            raise ValueError("threads and capacity must be at least 1")
        self.upstream = upstream
        self.downstream = downstream
        self.threads = threads
        self.capacity = capacity

    def run(self, count, deliver=None):
        """Push records 0..count-1 through both parts; ``deliver(i, result)`` sees them in order.

        Returns the statistics: wall time, busy and blocked seconds on each side, the largest
        number of records buffered at once, and the records delivered (always ``count``).
        """
        cond = threading.Condition()
        state = {"claim": 0, "consume": 0, "error": None, "up_blocked": 0.0, "up_busy": 0.0, "peak": 0}
        ready = {}
        clock = time.perf_counter

        def produce():
            while True:
                with cond:
                    while (
                        state["claim"] < count
                        and state["error"] is None
                        and state["claim"] >= state["consume"] + self.capacity
                    ):
                        t = clock()
                        cond.wait()
                        state["up_blocked"] += clock() - t
                    if state["claim"] >= count or state["error"] is not None:
                        return
                    i = state["claim"]
                    state["claim"] += 1
                t = clock()
                try:
                    item = self.upstream(i)
                except BaseException as e:  # handed to the consumer, which raises it
                    with cond:
                        state["error"] = StageFailed(i, e)
                        cond.notify_all()
                    return
                busy = clock() - t
                with cond:
                    state["up_busy"] += busy
                    ready[i] = item
                    state["peak"] = max(state["peak"], len(ready))
                    cond.notify_all()

        workers = [threading.Thread(target=produce, name=f"msopt-stage-{k}", daemon=True) for k in range(self.threads)]
        started = clock()
        for w in workers:
            w.start()
        down_blocked = down_busy = 0.0
        delivered = 0
        try:
            for i in range(count):
                with cond:
                    t = clock()
                    while i not in ready and state["error"] is None:
                        cond.wait()
                    down_blocked += clock() - t
                    if i not in ready:
                        raise state["error"]
                    item = ready.pop(i)
                    state["consume"] = i + 1
                    cond.notify_all()
                t = clock()
                result = self.downstream(item)
                down_busy += clock() - t
                if deliver is not None:
                    deliver(i, result)
                delivered += 1
        finally:
            with cond:
                if state["error"] is None and delivered < count:
                    state["error"] = StageFailed(-1, "stopped")
                cond.notify_all()
            for w in workers:
                w.join()
        wall = clock() - started
        return {
            "records": delivered,
            "threads": self.threads,
            "capacity": self.capacity,
            "wall_s": round(wall, 4),
            "records_per_s": round(delivered / wall, 3) if wall > 0 else None,
            "upstream_busy_s": round(state["up_busy"], 4),
            "upstream_blocked_s": round(state["up_blocked"], 4),
            "downstream_busy_s": round(down_busy, 4),
            "downstream_blocked_s": round(down_blocked, 4),
            "peak_buffered": state["peak"],
        }
