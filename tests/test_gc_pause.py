"""Pausing the garbage collector around passes that allocate many acyclic objects (msopt.compiled.gc_pause)."""

import gc
import weakref

from msopt.compiled.gc_pause import gc_paused


class Cell:
    def __init__(self):
        self.other = self  # a cycle: only the collector frees it


def test_what_a_pause_allocated_joins_the_oldest_generation():
    with gc_paused():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]
    assert gc.isenabled()
    oldest = {id(obj) for obj in gc.get_objects(generation=2)}
    assert all(id(item) in oldest for item in made), "left young, the next collections would scan them all"


def test_a_nested_pause_leaves_the_collector_paused_and_cycles_are_still_freed():
    with gc_paused():
        with gc_paused():
            cell = Cell()
        assert not gc.isenabled(), "the inner pause must not re-enable the collector"
    assert gc.isenabled()
    gone = weakref.ref(cell)
    del cell
    gc.collect()
    assert gone() is None


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
