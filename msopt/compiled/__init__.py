"""How the hot loops run: compiled by numba (jit; prebuild builds them ahead of time), two threads side by side
(side_by_side), and the collector held off while large structures are built (gc_pause). The code that calls
them does not know how they are compiled."""
