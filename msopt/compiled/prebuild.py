"""Building the prebuilt extension of msopt.compiled.jit: the planner's compiled loops ahead of time, with numba's pycc.

    python -m msopt.prebuild            # writes msopt/_loops*.so next to the sources (setup runs this)

Each function of ``jit.SIGNATURES`` is typed by numba's own compiler from its argument types (which gives its
result type), then exported under ``jit.export_name``; ``sources()`` returns the digest of the sources built
from. pycc links with the platform's C compiler and leaves temporary directories behind (its compiler probes
always, its build directory when it fails), so the whole build runs in one temporary directory removed
whatever happens, and the extension replaces the old one only once it is complete.
"""

import argparse
import importlib
import os
import sys
import tempfile
import time
import warnings

os.environ["MSOPT_PREBUILT"] = "0"  # the modules below must hold numba's dispatchers, not an older extension

from msopt.compiled import jit  # noqa: E402


def _exported(cc, name, types):
    """Export msopt's function "module.function" into ``cc`` with argument types ``types`` (numba's notation)."""
    from numba import njit
    from numba.core.sigutils import normalize_signature

    module, _, function = name.rpartition(".")
    found = getattr(importlib.import_module(f"msopt.{module}"), function)
    dispatcher = njit(getattr(found, "py_func", found))  # some modules compile theirs lazily: the plain function
    argtypes, _ = normalize_signature(f"void({types})")  # the result type comes from numba's typing below
    dispatcher.compile(argtypes)
    signature = dispatcher.overloads[argtypes].signature
    cc.export(jit.export_name(name), signature)(dispatcher.py_func)


def _releasing_the_gil(compiler):
    """pycc's Flags, made to release the GIL in every export's Python wrapper (what ``njit(nogil=True)`` does for
    the just-in-time form): the auto search runs simulations on a second thread (msopt.compiled.side_by_side). pycc has no
    option for it, so its module's Flags class is swapped for the build; None if that module has no Flags (then
    the exports hold the GIL: correct, only not side by side)."""
    flags = getattr(compiler, "Flags", None)
    if flags is None:
        return None

    class NoGil(flags):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    return flags, NoGil


def build(directory=jit._HERE):
    """Compile the extension into ``directory`` (the package's own by default); its path."""
    digest = jit.sources_digest()
    with tempfile.TemporaryDirectory(prefix="msopt-prebuild-") as work:
        saved, tempfile.tempdir = tempfile.tempdir, work  # pycc's own temporary directories, inside ours
        swapped = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pycc's pending deprecation: the just-in-time form stays the fallback
                from numba.pycc import CC, compiler

            swapped = _releasing_the_gil(compiler)
            if swapped is not None:
                compiler.Flags = swapped[1]

            cc = CC(jit.MODULE)
            cc.output_dir = work
            for name, types in jit.SIGNATURES.items():
                _exported(cc, name, types)

            def sources():
                return digest  # a constant once compiled

            cc.export("sources", "int64()")(sources)
            cc.compile()
        finally:
            tempfile.tempdir = saved
            if swapped is not None:
                compiler.Flags = swapped[0]
        target = os.path.join(directory, cc.output_file)
        os.replace(os.path.join(work, cc.output_file), target)
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m msopt.prebuild",
        description="Compile msopt's planning loops ahead of time into the package (msopt/_loops), so that no run "
        "loads numba (0.4-0.8 CPU s per planning process). Needs a C compiler (gcc) to link; takes about 12 s.",
        epilog="examples:\n  python -m msopt.prebuild          # build (again)\n"
        "  python -m msopt.prebuild --check  # exit 0 if the installed extension is fresh, 1 if not",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="only say whether a fresh extension is installed")
    args = parser.parse_args(argv)
    if args.check:
        module, why = jit.prebuilt_state()
        print(f"msopt: {why}", file=sys.stderr)
        return 0 if module is not None else 1
    started = time.monotonic()
    print("msopt: compiling the planner's loops ahead of time (about 12 s)...", file=sys.stderr)
    try:
        path = build()
    except Exception as exc:  # a missing C compiler, an unwritable package directory: the JIT form still works
        print(f"msopt: error: could not build the prebuilt loops: {exc}", file=sys.stderr)
        return 2
    print(f"msopt: wrote {path} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
