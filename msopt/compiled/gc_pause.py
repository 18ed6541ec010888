"""Pausing Python's cyclic garbage collector around passes that allocate many small acyclic objects."""

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector: these passes allocate millions of small acyclic objects,
    and repeated full collections over a large graph would cost more than the passes themselves.

    On leaving, what the pause allocated joins the oldest generation (gc.freeze then gc.unfreeze, which
    moves lists, not objects): left in the youngest, the next young collection would scan all of it, and
    the one after that again (0.15 s on a 61,000-node model, once per command). A cycle among those objects
    is still collected, by the next full collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
