"""Every input file msopt reads comes through here: a regular file, read with a bound, JSON without NaN or huge numbers.

Why: a path the user names may be a symlink to /dev/zero (data without end), a FIFO (a read that never
returns), a file under /proc or /sys (which claims to be regular, with a size that means nothing), or a
regular file that grows while it is read. So a path is stat'ed through its symlinks before it is
opened, opened without blocking (a FIFO swapped in meanwhile cannot hang the open), checked again on
the open descriptor (still that same regular file), and read with at most ``limit + 1`` bytes whatever
its size claims: one byte more than the limit is proof enough that the file is too large.

Each kind of file has its own limit (the MAX_* constants below, one place for the reference's limits table).
JSON numbers: Python's json reads NaN, Infinity and integers of any length, while every figure msopt
reads is a finite number in a float's range or an integer of at most 64 bits; anything else is refused
while parsing, naming the file and the field. Every refusal is an InputError (exit 2) that keeps the
real cause.
"""

import json
import os
import stat

from msopt.errors import InputError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MAX_COSTS_BYTES = 256 * MiB  # --costs: a 1M-op model's profile with host_ops is 129 MiB (indented); parsed, ~3x
MAX_HOST_PROFILE_BYTES = 1 * MiB  # --host-profile: a dozen fields and their sources
MAX_MODEL_BYTES = 2 * GiB  # a saved_model.pb, frozen GraphDef or .meta: protobuf cannot parse a larger message
MAX_CONFIG_BYTES = 1 * MiB  # files msopt wrote itself: a worker's settings, an output folder's marker
MAX_RULES_BYTES = 1 * MiB  # --rules: holds thousands of rules; a larger file is generated, not written
MAX_NPZ_FILE_BYTES = 4 * GiB  # --inputs on disk (only the arrays a signature needs are ever read)
MAX_NPZ_DIRECTORY_BYTES = 4 * MiB  # its zip directory: parsed whole into ~10x its size of Python objects
MAX_NPZ_DATA_BYTES = 2 * GiB  # all arrays read from one --inputs file, decompressed, checked before any is read
MAX_NPY_HEADER_BYTES = 10_000  # one array's .npy header (numpy's own default bound)
MAX_JSON_INT_DIGITS = 19  # every integer of int64's range, and no more
REFUSED_ROOTS = ("/proc", "/sys")  # kernel files: "regular", but their sizes and contents are not data

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path, what, limit):
    """``path`` opened for binary reading, once it is known to be a regular data file of at most ``limit`` bytes.

    The caller closes it; it still reads no more than it needs (use read_bytes for a whole file).
    """
    try:
        before = os.stat(path)  # through symlinks: the file that open() would reach
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror}") from None
    _check_kind(path, what, before)
    real = os.fsdecode(os.path.realpath(path))
    for root in REFUSED_ROOTS:
        if real == root or real.startswith(root + "/"):
            raise InputError(f"{path}: cannot read {what}: {real} is a kernel file under {root}, not a data file")
    try:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror}") from None
    try:
        after = os.fstat(fd)
        _check_kind(path, what, after)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise InputError(f"{path}: cannot read {what}: the file was replaced while it was opened")
        if after.st_size > limit:
            raise InputError(f"{path}: {what} is larger than {size_text(limit)} ({after.st_size:,} bytes)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path, what, limit):
    """The whole of a regular file of at most ``limit`` bytes, read with at most ``limit + 1`` bytes."""
    with open_regular(path, what, limit) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            data = bytearray()
            # One read of the size it claims (plus the byte that shows it grew), then small steps up to the limit.
            step = min(size, limit) + 1
            while len(data) <= limit:
                chunk = f.read(min(step, limit + 1 - len(data)))
                if not chunk:
                    break
                data += chunk
                step = MiB
        except OSError as e:
            raise InputError(f"{path}: cannot read {what}: {e.strerror}") from None
    if len(data) > limit:
        raise InputError(f"{path}: {what} is larger than {size_text(limit)} (it grew while it was read)")
    return bytes(data)


def read_text(path, what, limit):
    """A text file: UTF-8 (a BOM allowed), at most ``limit`` bytes, no NUL byte; errors name the line."""
    data = read_bytes(path, what, limit)
    text = _decode(data, path, what, "")
    nul = text.find("\0")
    if nul >= 0:
        raise InputError(f"{path}:{text.count(chr(10), 0, nul) + 1}: {what} contains a NUL byte")
    return text


def read_json(path, what, limit, field=None, numbers=None):
    """A JSON file of at most ``limit`` bytes whose numbers are all finite floats or integers of int64's range.

    A refused number names its field: ``field(keys)`` words it from the keys leading to it (e.g. ("ops",
    "MatMul") -> "op 'MatMul' has time"), and ``numbers`` says what such a field holds; where ``field`` gives
    None, the keys themselves ("'ops' > 'MatMul' is") and what any number in a JSON file msopt reads must be.
    """
    text = _decode(read_bytes(path, what, limit), path, what, "is not JSON text: ")
    refused = []

    def refuse(literal, why):
        refused.append(_Refused(literal, why))
        return refused[-1]

    def parse_int(literal):
        digits = len(literal) - literal.startswith("-")
        if digits > MAX_JSON_INT_DIGITS:
            return refuse(f"{literal[:12]}...", f"an integer of {digits} digits")
        value = int(literal)
        return value if -(1 << 63) <= value < (1 << 63) else refuse(literal, "an integer beyond 64 bits")

    def parse_float(literal):
        value = float(literal)
        return value if value - value == 0.0 else refuse(literal[:24], "beyond a float's range")

    try:
        doc = json.loads(
            text, parse_int=parse_int, parse_float=parse_float, parse_constant=lambda name: refuse(name, "not finite")
        )
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: {what} is not JSON text: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: {what} nests too deep") from None
    if refused:
        keys, bad = _first_refused(doc)
        named = field(keys) if field is not None else None
        words = named or (" > ".join(repr(k) for k in keys) or "the document") + " is"
        rule = (named and numbers) or f"msopt reads finite numbers and integers of at most {MAX_JSON_INT_DIGITS} digits"
        raise InputError(f"{path}: {words} {bad.literal} ({bad.why}); {rule}")
    return doc


class _Refused:
    """What a refused JSON number parses to, until the document is searched for where it sits."""

    __slots__ = ("literal", "why")

    def __init__(self, literal, why):
        self.literal, self.why = literal, why


def _first_refused(doc):
    """(keys leading to, value) of the first _Refused in document order (no recursion: depth is the file's)."""
    stack = [((), doc)]
    while stack:
        keys, value = stack.pop()
        if isinstance(value, _Refused):
            return keys, value
        if isinstance(value, dict):
            stack.extend(((*keys, k), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*keys, i), v) for i, v in reversed(list(enumerate(value))))
    raise AssertionError("a refused number is in the document")


def _decode(data, path, what, problem):
    """``data`` as UTF-8 text (a BOM allowed); ``problem`` leads the error's words (e.g. "is not JSON text: ")."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{path}: {what} {problem or 'is '}UTF-16; save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(
            f"{path}:{line}: {what} {problem or 'is '}not UTF-8 text (byte 0x{data[e.start]:02x})"
        ) from None


def _check_kind(path, what, status):
    if stat.S_ISREG(status.st_mode):
        return
    kind = next((name for test, name in _KINDS if test(status.st_mode)), "not a regular file")
    raise InputError(f"{path}: cannot read {what}: it is {kind}; msopt reads regular files only")


def size_text(n):
    """1048576 -> '1 MiB' (the largest binary unit that divides it, else bytes)."""
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n:,} bytes"
