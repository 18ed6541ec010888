"""Put an output file or directory in place whole: built beside the target, then swapped in atomically.

Every output is built in a private box beside the target (``.NAME.msopt-PID-XXXX.tmp/NAME``) and moved
to the target with one rename. An existing target (``--force``) is exchanged with the new one in a
single step (Linux ``renameat2(RENAME_EXCHANGE)``), so the target is always there and always complete:
a kill at any moment leaves either the old or the new version, and concurrent writers just take turns
(the last one wins). The replaced version lands in the writer's box and goes with it. Boxes left by
killed runs are removed by the next write to the same target (their PID names a dead process).

Where the kernel or the file system cannot exchange (other systems, some network file systems), a
replaced directory is renamed aside first: the target is then missing for the instant between two
renames.
"""

import contextlib
import ctypes
import errno
import glob
import os
import shutil
import sys
import tempfile
from pathlib import Path

from msopt.errors import InputError, held
from msopt.files.output_guard import check_parent, refuse_special

_AT_FDCWD = -100
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_ATTEMPTS = 100  # concurrent writers can undo each other's step; each retry makes progress
_TAG = "msopt-"


def _load_renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without the wrapper (glibc < 2.28, some musl)
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


_renameat2_function = _load_renameat2()


def _renameat2(src, dst, flags):
    """True when done; False when this system or file system cannot do it; OSError for other failures."""
    if _renameat2_function is None:
        return False
    if _renameat2_function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(dst))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    try:  # a killed process its parent has not reaped yet is dead too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def boxes(out):
    """The build boxes of ``out`` present beside it: {path: pid of the run that made it}."""
    out = Path(out)
    prefix = f".{out.name}.{_TAG}"
    found = {}
    for path in out.parent.glob(glob.escape(prefix) + "*.tmp"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit():
            found[path] = int(pid)
    return found


def clean_stale(out):
    """Remove the boxes beside ``out`` left by runs that are no longer alive."""
    for path, pid in boxes(out).items():
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(OSError):
                path.unlink()


@contextlib.contextmanager
def staged(out):
    """A fresh path beside ``out`` (same directory, same name) to build the output in; removed on exit."""
    out = Path(out)
    refuse_special(out)  # again at write time: a writer may be reached without a command's checks
    check_parent(out)
    clean_stale(out)
    with held():  # a signal between creating the box and arranging its removal would leave it behind
        try:
            box = Path(tempfile.mkdtemp(prefix=f".{out.name}.{_TAG}{os.getpid()}-", suffix=".tmp", dir=out.parent))
        except OSError as e:
            raise InputError(f"{out}: cannot write here: {e.strerror}") from None
    try:
        yield box / out.name
    finally:
        with held():  # a first signal here waits for the box to go
            shutil.rmtree(box, ignore_errors=True)


def put(built, out, force):
    """Move ``built`` (from ``staged``) to ``out`` in one step; ``force`` replaces an existing ``out``."""
    built, out = Path(built), Path(out)
    for _ in range(_ATTEMPTS):
        if _create(built, out):
            return
        if not force:
            raise InputError(f"{out}: output already exists (use --force to replace it)")
        if _replace(built, out):
            return
    raise InputError(f"{out}: other writers kept replacing the output; try again")


def _create(built, out):
    """Move ``built`` to a free ``out``: True; False when ``out`` exists."""
    try:
        done = _renameat2(built, out, _RENAME_NOREPLACE)
    except FileExistsError:
        return False
    if done:
        return True
    if os.path.lexists(out):
        return False
    if built.is_dir():
        try:
            os.rename(built, out)  # onto a non-empty directory this fails, onto a file as well
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                return False
            raise
        return True
    try:
        os.link(built, out)  # fails rather than overwrite a file another writer just put there
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links
        os.replace(built, out)
        return True
    built.unlink()
    return True


def _replace(built, out):
    """Swap ``built`` with the existing ``out``: True; False when ``out`` vanished meanwhile (try again)."""
    try:
        if _renameat2(built, out, _RENAME_EXCHANGE):
            return True
    except FileNotFoundError:
        return False
    if not built.is_dir() and not (out.is_dir() and not out.is_symlink()):
        os.replace(built, out)  # a file over a file (or a symlink): atomic anyway
        return True
    aside = Path(tempfile.mkdtemp(prefix="old-", dir=built.parent)) / out.name  # in the box: removed with it
    try:
        os.rename(out, aside)
    except FileNotFoundError:
        return False
    try:
        os.rename(built, out)
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False  # another writer came in between: the next attempt swaps again
        raise
    return True


def write_bytes(out, data, force=True):
    """Write ``data`` to the file ``out`` whole (replacing it when ``force``)."""
    with staged(out) as built:
        built.write_bytes(data)
        put(built, out, force)
