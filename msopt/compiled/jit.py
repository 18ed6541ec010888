"""Compiling the planner's hot loops (the simulator's event loop, list schedules, orders, walks) to machine code.

Why compiled: these loops are sequential by nature (an event queue, a ready list taken in order), so numpy
cannot vectorize them. One Python source, two ways to run it, the same machine code either way:

- prebuilt: ``python -m msopt.prebuild`` (setup runs it) compiles the functions of ``SIGNATURES`` ahead of
  time into one extension module, ``msopt/_loops``, with numba's pycc. Importing it takes about a millisecond
  and loads no numba: numba's import and its first cached call cost 0.4-0.8 CPU s per planning process
  (measured: 1.1 -> 0.65 s for a 3-op model, 5.7 -> 4.9 s for a 61k-node detector). The extension records
  a digest of the sources it was built from; a process that finds it built from other sources (an edited
  loop) does not use it.
- just in time: otherwise numba compiles each function on its first call (types inferred from its arguments)
  and caches the machine code on disk (next to this package, else in the user's cache directory), so only
  the first run on a machine pays the compilation. ``MSOPT_PREBUILT=0`` forces this form.

Why numba: it compiles the same Python source from wheels on the package index; the prebuilt form needs a C
compiler only to link the extension, at install time. Imported only by the modules that plan or simulate,
never by ``import msopt``.
"""

import hashlib
import os
from functools import cache

from msopt.errors import check_interrupted

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package: msopt/

# The compiled functions called from Python, by "module.function" (the module's path in this package), with
# their argument types in numba's notation (int64, float64 and bool arrays, all C-contiguous). The prebuilt
# extension exports exactly these; the compiled functions they call are compiled into it with them.
_I, _F, _B = "int64[::1]", "float64[::1]", "bool_[::1]"
SIGNATURES = {
    "simulator.event_loop.run": (
        f"Tuple(({_I}, {_I}, {_I}, {_I}, {_I}, {_B}, {_B})), {_F}, {_F}, {_I}, int64, int64, int64,"
        f" Tuple((int64, int64, {_I}, {_I}, {_F})), int64, {_F}, {_I}, bool_"
    ),
    "simulator.list_schedule._schedule": (
        f"{_I}, {_I}, {_I}, {_F}, {_F}, {_B}, {_B}, {_F}, int64, bool_, {_I}, float64, float64, float64, float64, {_I}"
    ),
    "simulator.bound._ancestor_sums": f"{_I}, {_I}, {_I}, {_F}, {_F}, {_B}",
    "simulator.bound._descendants": f"int64, {_I}, {_I}, {_B}, {_B}, {_I}, {_I}",
    "simulator.bound._descendant_sums": f"{_I}, {_I}, {_I}, {_F}, {_F}, {_B}",
    "graph.order._walk": f"{_I}, {_I}, {_I}, {_I}, {_B}, bool_",
    "graph.order._longest": f"{_I}, {_I}, {_I}, {_F}, {_F}",
    "graph.order._priority_walk": f"{_I}, {_I}, {_I}, {_F}, {_I}, {_I}, {_I}",
    "simulator.shapes._unknown_outputs": f"{_B}, {_B}, {_I}, {_I}, {_I}",
    "graph.path_cover._greedy_cover": f"{_I}, {_I}, {_I}, {_I}, int64, {_I}",
    "graph.path_cover._number_chains": f"{_I}, {_I}, {_I}",
    "rules.chains._spans": f"{_I}, {_I}, {_I}, {_I}, {_F}, {_F}, {_F}, {_F}",
    "rules.chains._fold": f"{_I}, {_I}, {_I}, {_I}, {_I}, {_I}, {_F}, {_F}, int64, {_I}",
    "rules.towers._signatures": f"{_I}, {_I}, {_I}, uint64[::1], uint64[::1]",
    "rules.towers._follow_inputs": f"{_I}, {_I}, {_I}, {_I}, {_I}",
}
MODULE = "_loops"  # the prebuilt extension, in this package


def export_name(name):
    """The prebuilt extension's name for the function "module.function"."""
    return name.replace(".", "__")


def digested_modules():
    """The modules the prebuilt extension is built from, by name in this package: this one, the modules of
    SIGNATURES, and the build itself (msopt.compiled.prebuild: how it compiles, e.g. releasing the GIL, counts too)."""
    return sorted({"compiled.jit", "compiled.prebuild", *(name.rpartition(".")[0] for name in SIGNATURES)})


def sources_digest(directory=_HERE):
    """A digest of the sources of ``digested_modules``, read from ``directory`` (the package's), as an int64."""
    digest = hashlib.sha256()
    for module in digested_modules():
        with open(os.path.join(directory, *module.split(".")) + ".py", "rb") as f:
            digest.update(f.read())
    return int.from_bytes(digest.digest()[:8], "little", signed=True)


def prebuilt_state():
    """(the prebuilt extension module or None, a sentence saying why): the module only if it was built from the
    current sources."""
    try:
        from msopt import _loops  # type: ignore[attr-defined]
    except ImportError as exc:
        check_interrupted()  # an interrupted import surfaces as ImportError
        return None, f"no prebuilt extension ({exc}); run python -m msopt.prebuild"
    except Exception as exc:  # e.g. built against another numpy: the just-in-time form still works
        check_interrupted()
        return None, f"the prebuilt extension does not load ({type(exc).__name__}: {exc}); run python -m msopt.prebuild"
    if _loops.sources() != sources_digest():
        return None, f"{_loops.__file__} was built from other sources; run python -m msopt.prebuild"
    return _loops, f"{_loops.__file__} is fresh"


@cache
def prebuilt():
    """The prebuilt extension module if it is there, allowed (MSOPT_PREBUILT is not 0) and fresh, else None."""
    if os.environ.get("MSOPT_PREBUILT", "1") == "0":
        return None
    return prebuilt_state()[0]


def compiled(function=None, *, inline=False):
    """``function`` as machine code: the prebuilt extension's export, else numba's just-in-time form.

    With the extension in use, a compiled function it does not export is compiled into it with its callers
    and must not be called from Python: it becomes a stub that says so (an entry missing from SIGNATURES).
    ``@compiled(inline=True)``: a small function its compiled callers take in whole (numba inlines it before
    typing), which saves a call with reference counting per array passed (the event loop's heaps: 5-6%).
    """
    if function is None:
        return lambda function: compiled(function, inline=inline)
    name = f"{function.__module__.removeprefix('msopt.')}.{function.__name__}"
    module = prebuilt()
    if module is None:
        from numba import njit

        return njit(cache=True, nogil=True, inline="always" if inline else "never")(function)
    if name in SIGNATURES:
        return getattr(module, export_name(name))

    def unexported(*args, **kwargs):
        raise RuntimeError(f"msopt.compiled.jit: {name} is compiled but not in SIGNATURES, so Python cannot call it")

    return unexported
