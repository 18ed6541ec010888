"""Pausing Python's cyclic garbage collector around passes that allocate many small acyclic objects."""

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector: these passes allocate millions of small acyclic objects,
    and repeated full collections over a large graph would cost more than the passes themselves."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
