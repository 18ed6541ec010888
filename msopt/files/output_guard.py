"""Refuse, before any work starts, every output path whose writing could destroy a user's data.

Each command hands ``check`` every path it will write and every path it reads, before it loads anything,
so a refused path leaves nothing written. The rules follow tools users trust with their files:

- An output may not be, contain or sit inside an input, resolved through symlinks and ``..`` (git
  refuses a worktree inside another, ``rm --preserve-root`` refuses ``/``): writing there would replace
  or delete the input, and replacing a folder that holds the input deletes it with everything beside it.
- Two outputs of one command may not be the same path or nest: the second would replace the first.
- An output is a regular file or a folder on a real file system. Device nodes, FIFOs, sockets and
  anything under /proc, /sys or /dev are refused: as root, replacing /dev/null breaks the machine, and
  /proc files claim to be regular.
- An existing path needs ``--force``, and even then only what msopt itself writes there is replaced,
  as ``rsync --delete`` keeps what it was not asked to remove: an empty folder, a folder msopt marked as
  a model it wrote (``MARKER``, listing what it put there, so a folder a user added files to is kept),
  or a file whose content is of the kind the option writes (a JSON document for ``--report``, an .npz
  for ``--save-outputs``, a picture of the same format for ``visualize -o``, a model for ``-o``).

``msopt.files.outputs`` checks the special-file rule again when it writes, for writers reached without a command.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from msopt.errors import InputError
from msopt.files.reading import MAX_CONFIG_BYTES, REFUSED_ROOTS

MARKER = ".msopt-output"  # in every folder msopt writes: what it wrote there (JSON)
# Kernel file systems (those msopt never reads, and /dev): their files are not data a user keeps.
PSEUDO_ROOTS = (*REFUSED_ROOTS, "/dev")
_SNIFF_BYTES = 4096
_ATTEMPTS = 100  # reads of a folder that concurrent writers keep swapping (msopt.files.outputs retries as often)

# kind -> (what it is, in a message; a test of the file's first bytes)
_FILE_KINDS = {
    "json": ("a JSON document", lambda head: head.lstrip()[:1] in (b"{", b"[")),
    "npz": ("an .npz archive", lambda head: head[:4] in (b"PK\x03\x04", b"PK\x05\x06")),
    "svg": ("an SVG picture", lambda head: b"<svg" in head),
    "png": ("a PNG picture", lambda head: head.startswith(b"\x89PNG\r\n\x1a\n")),
    "pdf": ("a PDF document", lambda head: head.startswith(b"%PDF-")),
    "dot": ("a graphviz file", lambda head: head.lstrip().split(b" ", 1)[0] in (b"digraph", b"graph", b"strict")),
    "html": ("an HTML page", lambda head: b"<html" in head.lower() or b"<!doctype html" in head.lower()),
    "text": ("a file msopt wrote", lambda head: b"msopt" in head),
}
KINDS = frozenset(_FILE_KINDS) | {"model"}


@dataclass(frozen=True)
class Output:
    """One path a command writes: the option that named it (for messages), the path, what is written there."""

    option: str
    path: str | os.PathLike
    kind: str


def given(option: str, value: str | os.PathLike | None) -> str | None:
    """``value`` as a path, None when not given; an empty path is refused (it would silently mean a default)."""
    if value is None:
        return None
    text = os.fspath(value)
    if not text:
        raise InputError(f"{option}: empty path")
    return text


def check(inputs: Iterable[str | os.PathLike | None], outputs: Iterable[Output | None], force: bool) -> None:
    """InputError naming the option and path at fault, unless every output may be written as the module says."""
    protected = [_resolved(p) for p in inputs if p]
    seen: list[tuple[Output, set[Path]]] = []
    for out in outputs:
        if out is None:
            continue
        assert out.kind in KINDS, out.kind
        text = given(out.option, out.path)
        names = _names(text)
        for input_path in protected:
            for name in names:
                if name == input_path:
                    raise InputError(f"{out.option} {text}: the output would overwrite the input {input_path}")
                if input_path in name.parents:
                    raise InputError(f"{out.option} {text}: the output would be written inside the input {input_path}")
                if name in input_path.parents:
                    raise InputError(
                        f"{out.option} {text}: the output would replace a folder holding the input {input_path}"
                    )
        for other, other_names in seen:
            if any(a == b or a in b.parents or b in a.parents for a in names for b in other_names):
                raise InputError(f"{out.option} {text} and {other.option} {other.path}: two outputs at one path")
        seen.append((out, names))
        refuse_special(text, out.option)
        check_parent(text, out.option)
        if os.path.lexists(text):
            if not force:
                raise InputError(f"{out.option} {text}: output already exists (use --force to replace it)")
            why = not_replaceable(text, out.kind)
            if why:
                raise InputError(
                    f"{out.option} {text}: {why}; --force replaces only what msopt wrote: remove it yourself"
                )


def refuse_special(path: str | os.PathLike, option: str = "output") -> None:
    """InputError unless ``path`` is (or would be) a regular file or folder outside the kernel's file systems."""
    for name in _names(os.fspath(path)):
        for root in map(Path, PSEUDO_ROOTS):
            if name == root or root in name.parents:
                raise InputError(f"{option} {path}: not a regular file or folder (it is under {root})")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"{option} {path}: cannot be checked: {e.strerror}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(f"{option} {path}: not a regular file or folder (a device, FIFO or socket)")


def not_replaceable(path: str | os.PathLike, kind: str) -> str | None:
    """Why ``--force`` may not replace the existing ``path`` as an output of ``kind``; None when it may."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        return _folder_not_replaceable(path)
    if kind == "model":
        return None if _is_model_file(path) else "not a model file"
    what, looks_right = _FILE_KINDS[kind]
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError as e:
        return f"cannot be read to check what it is ({e.strerror})"
    return None if looks_right(head) else f"not {what}"


def mark(folder: str | os.PathLike) -> None:
    """Record in ``folder`` (a model msopt just built) that msopt wrote it and what it holds."""
    folder = Path(folder)
    entries = sorted(p.name for p in folder.iterdir() if p.name != MARKER)
    document = {"written_by": "msopt", "entries": entries}
    (folder / MARKER).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def _folder_not_replaceable(folder: Path) -> str | None:
    # The listing and the marker come from one open folder, and count only if that folder is still the one at the
    # path once read: a concurrent writer swaps its new output in and deletes the old one (entry by entry, the
    # marker perhaps first) outside the path, so a folder read while it was swapped out is read again.
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except FileNotFoundError:
            return None  # gone meanwhile: nothing left to lose
        except OSError as e:
            return f"a folder that cannot be opened ({e.strerror})"
        try:
            present = set(os.listdir(fd))
            recorded = _marker(fd) if MARKER in present else None
            opened = os.fstat(fd)
        except OSError as e:
            return f"a folder that cannot be listed ({e.strerror})"
        finally:
            os.close(fd)
        try:
            now = os.stat(folder)
        except FileNotFoundError:
            continue
        if (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino):
            break
    if not present:
        return None
    entries = set(recorded["entries"]) if _is_marker(recorded) else None
    if entries is None:
        return "a folder msopt did not write"
    extra = sorted(present - entries - {MARKER})
    if extra:
        return f"a folder msopt wrote, to which '{extra[0]}' was added"
    return None


def _marker(folder_fd: int) -> object:
    """The marker's JSON, read from the open folder; None unless it is a small regular file of JSON (a FIFO or a
    link to /dev/zero is no marker, and is not waited on or read whole)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(MARKER, flags, dir_fd=folder_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        status = os.fstat(f.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_CONFIG_BYTES:
            return None
        try:
            return json.loads(f.read(MAX_CONFIG_BYTES + 1))
        except (ValueError, RecursionError):
            return None


def _is_marker(recorded: object) -> bool:
    return (
        isinstance(recorded, dict)
        and recorded.get("written_by") == "msopt"
        and isinstance(recorded.get("entries"), list)
        and all(isinstance(name, str) for name in recorded["entries"])
    )


def _is_model_file(path: Path) -> bool:
    from msopt.load import load  # the one loader: a file it reads as a model is one msopt may have written

    try:
        load(str(path))
    except InputError:
        return False
    return True


def _resolved(path: str | os.PathLike) -> Path:
    resolved = Path(os.path.realpath(path))
    if resolved.name in ("saved_model.pb", "saved_model.pbtxt"):
        return resolved.parent  # a SavedModel named by its proto file: its folder is the input
    return resolved


def _names(text: str) -> set[Path]:
    """The places ``text`` writes: the entry replaced (parent resolved) and what a symlink there points to."""
    absolute = os.path.abspath(text)
    entry = Path(os.path.realpath(os.path.dirname(absolute))) / os.path.basename(absolute)
    return {entry, Path(os.path.realpath(absolute))}


def check_parent(path: str | os.PathLike, option: str | None = None) -> None:
    """InputError naming ``path`` (and the option that named it) unless the folder it is to be written in exists."""
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        named = f"{option} {path}" if option else f"{path}"
        raise InputError(f"{named}: parent directory does not exist (No such file or directory)")
