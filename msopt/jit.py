"""Compiling the planner's hot loops (the simulator's event loop, list schedules, orders) with numba.

Why numba: these loops are sequential by nature (an event queue, a ready list taken in order),
so numpy cannot vectorize them, and numba compiles the same Python source to machine code from
wheels on the package index, with no compiler needed at install time. Compiled functions are
cached on disk (next to this package, else in the user's cache directory, numba's own fallback),
so only the first run on a machine pays the compilation; a later process pays about half a
second to load numba and the cache. Imported only by the modules that plan or simulate, never by
``import msopt``.
"""

from numba import njit


def compiled(function):
    """``function`` compiled to machine code on first call (types inferred from its arguments), cached on disk."""
    return njit(cache=True, nogil=True)(function)
