"""Input batches for a model's signatures: generated from what the graph says each input feeds, or read from an .npz.

One generator serves ``partition --verify``, ``run`` and the tests. Generated values follow the
graph (msopt.graph.input_needs): ids stay below the row count of the tables they index, control-flow
predicates are scalars, strings take the form their parsers expect. An .npz file is data only: it
is read without pickle support, only the arrays the signature needs are read, and each one's header is
checked against msopt.files.reading's limits before any array is decompressed.
"""

import math
import os
import struct
import zipfile
import zlib

import numpy as np

from msopt.errors import InputError
from msopt.files.reading import (
    MAX_NPY_HEADER_BYTES,
    MAX_NPZ_DATA_BYTES,
    MAX_NPZ_DIRECTORY_BYTES,
    MAX_NPZ_FILE_BYTES,
    open_regular,
    size_text,
)

NUMPY_DTYPES = {
    "float": np.float32,
    "double": np.float64,
    "half": np.float16,
    "bfloat16": np.float32,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
    "string": object,
}
DEFAULT_ID_BOUND = 10  # integers the graph does not bound: small, so valid as ids of small tables
TOKENS = np.array([b"a", b"bc", b"zz", b"x1", b"q", b"id7", b""], dtype=object)
CSV_FIELDS = {1: "0.5", 2: "0.25", 3: "3", 9: "7", 7: "ab", 10: "1"}  # DataType -> a field value it parses
STRING_OBJECT_BYTES = 64  # what a string element costs besides its width once it is a Python bytes object
READ_STEP = 1 << 20  # an array is decompressed into place this many bytes at a time
_END, _MAX_COMMENT = 22, 65535  # a zip's end record, and the longest comment that may follow it


class InputGenerator:
    """Random batches for a signature's inputs ({key: spec}); ``view`` (a GraphView) lets the graph shape them."""

    def __init__(self, inputs, view=None):
        from msopt.graph.input_needs import Need, input_needs

        self.inputs = dict(sorted(inputs.items()))
        self.needs = input_needs(view, self.inputs) if view is not None else {k: Need() for k in self.inputs}
        for key, spec in self.inputs.items():
            need = self.needs[key]
            if spec["dtype"] not in NUMPY_DTYPES:
                raise InputError(
                    f"input '{key}' has dtype {spec['dtype']}, which msopt cannot generate; pass --inputs FILE.npz"
                )
            if need.bound is None and need.unknown:
                raise InputError(
                    f"input '{key}' indexes a table at node '{need.unknown}' whose size the graph does "
                    "not record, so msopt cannot generate valid ids; pass --inputs FILE.npz"
                )
            if spec["dtype"] == "string" and need.text and need.text[0] == "opaque":
                raise InputError(
                    f"input '{key}' is parsed by {need.text[1]} (node '{need.text[2]}'), whose format "
                    "msopt does not generate; pass --inputs FILE.npz"
                )

    def shape(self, key, batch_size):
        spec, need = self.inputs[key], self.needs[key]
        if spec["shape"] is None:
            if need.scalar:
                return []
            return [batch_size if d is None else d for d in need.shape] if need.shape else [batch_size]
        return [batch_size if d is None else d for d in spec["shape"]]

    def __call__(self, batch_size=3, seed=0):
        rng = np.random.default_rng(seed)
        return {key: self._value(key, self.shape(key, batch_size), rng) for key in self.inputs}

    def _value(self, key, shape, rng):
        dtype, need = self.inputs[key]["dtype"], self.needs[key]
        if dtype == "string":
            flat = [_text(need.text, rng, need.bound) for _ in range(int(np.prod(shape)))]
            return np.array(flat, dtype=object).reshape(shape)
        if dtype == "bool":
            # A control-flow predicate takes the serving branch (False, e.g. is_training): random ops of a
            # training branch would make two runs differ.
            return np.zeros(shape, np.bool_) if need.scalar else rng.random(shape) < 0.5
        numpy_type = NUMPY_DTYPES[dtype]
        if np.issubdtype(numpy_type, np.integer) or need.bound is not None:
            return rng.integers(0, need.bound or DEFAULT_ID_BOUND, size=shape).astype(numpy_type)
        return rng.standard_normal(shape).astype(numpy_type)


def random_inputs(inputs, batch_size=3, seed=0, view=None):
    """Dtype- and shape-correct random values for a signature's inputs ({key: spec}), shaped by ``view``."""
    return InputGenerator(inputs, view)(batch_size, seed)


def _text(text, rng, bound):
    """One string in the form ``text`` (see input_needs.Need) describes."""
    kind = text[0] if text else "token"
    if kind == "number":
        value = (
            rng.integers(0, bound or DEFAULT_ID_BOUND) if text[1] == "int" else round(float(rng.standard_normal()), 3)
        )
        return str(value).encode()
    if kind == "csv":
        return text[2].join(CSV_FIELDS.get(t, "1") for t in text[1]).encode()
    if kind == "split":
        return text[1].encode().join(_text(text[2], rng, bound) for _ in range(int(rng.integers(1, 4))))
    if kind == "example":
        return _example(text[1], rng)
    return rng.choice(TOKENS)


def _example(features, rng):
    """A serialized tf.Example holding each feature a parse op reads, with values its consumers accept."""
    from msopt.graph.protos import Example

    example = Example()
    for name, dtype, count, need in features:
        count = int(rng.integers(1, 4)) if count is None else count
        feature = example.features.feature[name]
        if dtype == 7:  # string
            feature.bytes_list.value.extend(_text(need.text, rng, need.bound) for _ in range(count))
        elif dtype in (3, 9):  # int32, int64
            feature.int64_list.value.extend(int(v) for v in rng.integers(0, need.bound or DEFAULT_ID_BOUND, count))
        else:
            feature.float_list.value.extend(float(v) for v in rng.standard_normal(count).astype(np.float32))
    return example.SerializeToString()


# -- inputs from a file ----------------------------------------------------------------------------
def read_npz(path, inputs):
    """One batch from an .npz file, every input present with the signature's dtype and shape.

    The file is data, never code: no pickle, and only the arrays the signature needs are read (see
    _read_batches for the bounds).
    """
    return _read_batches(path, {None: inputs})[None]


def read_signature_inputs(model, path):
    """{signature: batch} from one .npz for every signature a model declares (no TensorFlow needed)."""
    from msopt.graph.contents import signatures

    return _read_batches(path, {name: spec["inputs"] for name, spec in signatures(model).items()})


def _read_batches(path, specs):
    """{name: batch} for each signature's inputs ({name: {key: spec}}), every array read once.

    Bounded reading (msopt.files.reading's limits): a regular file of at most MAX_NPZ_FILE_BYTES whose zip
    directory is at most MAX_NPZ_DIRECTORY_BYTES (parsed whole by zipfile), members stored or deflated (what
    np.savez and np.savez_compressed write). Before any array is decompressed, each needed member's .npy
    header is read and checked: no Python objects, the signature's dtype and shape, and the declared sizes
    of them all (a string element counted with the bytes object it becomes) at most MAX_NPZ_DATA_BYTES.
    """
    with open_regular(path, "inputs file", MAX_NPZ_FILE_BYTES) as f:
        archive = _open_zip(f, path)
        with archive:
            members = _members(archive)
            wanted = sorted({key for inputs in specs.values() for key in inputs})
            for inputs in specs.values():
                missing = sorted(set(inputs) - set(members))
                if missing:
                    raise InputError(
                        f"{path}: no array for input '{missing[0]}' (the signature needs: {', '.join(sorted(inputs))})"
                    )
            headers, total = {}, 0
            for key in wanted:  # every header checked before any array is read
                headers[key] = _header(archive, members[key], path, key)
                dtype, shape = headers[key][:2]
                for inputs in specs.values():
                    if key in inputs:
                        try:
                            _check_kind(key, inputs[key], dtype, shape)
                        except InputError as e:
                            raise InputError(f"{path}: {e}") from None
                total += _cost(dtype, shape)
                if total > MAX_NPZ_DATA_BYTES:
                    raise InputError(
                        f"{path}: input '{key}' ({members[key].filename}: {dtype} {list(shape)}) takes the arrays "
                        f"read to over {size_text(MAX_NPZ_DATA_BYTES)} decompressed; msopt reads at most that "
                        f"from an inputs file"
                    )
            arrays = {key: _data(archive, members[key], headers[key], path, key) for key in wanted}
    return {
        name: {key: check_input(key, inputs[key], arrays[key]) for key in sorted(inputs)}
        for name, inputs in specs.items()
    }


def _open_zip(f, path):
    """``f`` as a zip archive, once its end record shows a directory of at most MAX_NPZ_DIRECTORY_BYTES."""
    try:
        head = f.read(6)
        if head == b"\x93NUMPY":
            raise InputError(f"{path}: cannot read inputs: a single .npy array, not an .npz file of named arrays")
        size = f.seek(0, os.SEEK_END)
        directory = _directory_size(f, size)
        if directory is None:
            why = "it is empty" if size == 0 else "no zip directory at its end"
            raise InputError(f"{path}: cannot read inputs: not an .npz (zip) file ({why})")
        if directory > MAX_NPZ_DIRECTORY_BYTES:
            raise InputError(
                f"{path}: cannot read inputs: its zip directory is {directory:,} bytes; msopt reads at most "
                f"{size_text(MAX_NPZ_DIRECTORY_BYTES)} (fewer named arrays)"
            )
        f.seek(0)
        return zipfile.ZipFile(f)
    except (OSError, ValueError, EOFError, struct.error, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: cannot read inputs: not an .npz (zip) file ({_reason(e)})") from None


def _directory_size(f, size):
    """The size of the zip directory that zipfile will read whole (its end record, or the zip64 one), or None."""
    tail = min(size, _END + _MAX_COMMENT)
    f.seek(size - tail)
    data = f.read(tail)
    at = len(data) - _END
    if not (at >= 0 and data[at : at + 4] == b"PK\x05\x06" and data[-2:] == b"\0\0"):  # as zipfile looks
        at = data.rfind(b"PK\x05\x06")
        if at < 0 or len(data) - at < _END:
            return None
    (directory,) = struct.unpack_from("<I", data, at + 12)
    end = size - tail + at
    if end >= 20 + 56:  # a zip64 locator just before the end record points zipfile at the zip64 end record
        f.seek(end - 20 - 56)
        record = f.read(56 + 20)
        if record[56:60] == b"PK\x06\x07" and record[:4] == b"PK\x06\x06":
            (directory,) = struct.unpack_from("<Q", record, 40)
    return directory


def _members(archive):
    """{key: ZipInfo} as np.load names them: "X.npy" is key "X", a member named exactly "X" wins."""
    members = {}
    for info in archive.infolist():
        if info.filename.endswith(".npy"):
            members[info.filename[:-4]] = archive.getinfo(info.filename)
    for info in archive.infolist():
        members[info.filename] = archive.getinfo(info.filename)
    return members


def _header(archive, info, path, key):
    """(dtype, shape, fortran_order, header bytes) of a member, read from its first bytes only."""
    where = f"{path}: input '{key}' ({info.filename})"
    if info.flag_bits & 0x1:
        raise InputError(f"{where} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InputError(
            f"{where} is compressed with zip method {info.compress_type}; msopt reads stored or deflated "
            f"members (np.savez, np.savez_compressed)"
        )
    if info.file_size > MAX_NPZ_DATA_BYTES + MAX_NPY_HEADER_BYTES:
        raise InputError(
            f"{where} declares {info.file_size:,} bytes decompressed; msopt reads at most "
            f"{size_text(MAX_NPZ_DATA_BYTES)} from an inputs file"
        )
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(member, MAX_NPY_HEADER_BYTES)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(member, MAX_NPY_HEADER_BYTES)
            else:
                raise ValueError(f".npy format version {version[0]}.{version[1]} (structured field names)")
            offset = member.tell()
    except (OSError, ValueError, EOFError, SyntaxError, zipfile.BadZipFile, zlib.error, RuntimeError) as e:
        raise InputError(f"{where} is not a readable .npy array: {_reason(e)}") from None
    if dtype.hasobject:
        raise InputError(f"{where} holds Python objects (pickled data); msopt reads plain arrays only")
    if any(d < 0 for d in shape):
        raise InputError(f"{where} has a negative dimension in its shape {list(shape)}")
    cost = _cost(dtype, shape)  # exact: Python integers cannot overflow
    if cost > MAX_NPZ_DATA_BYTES:
        raise InputError(
            f"{where}: a {dtype} array of shape {list(shape)} takes {cost:,} bytes; msopt reads at most "
            f"{size_text(MAX_NPZ_DATA_BYTES)} from an inputs file"
        )
    need = offset + math.prod(shape) * dtype.itemsize
    if info.file_size < need:
        raise InputError(f"{where} is truncated: {info.file_size:,} bytes for a header and data of {need:,}")
    return dtype, tuple(shape), fortran, offset


def _cost(dtype, shape):
    """Bytes an array takes once read: its data, and for strings the bytes object each element becomes."""
    count = math.prod(shape)
    return count * dtype.itemsize + (count * STRING_OBJECT_BYTES if dtype.kind in "SU" else 0)


def _data(archive, info, header, path, key):
    """A member's array, read in steps into an array of the size its checked header gave."""
    dtype, shape, fortran, offset = header
    count = math.prod(shape)
    array = np.empty(count, dtype)
    try:
        with archive.open(info) as member:
            member.read(offset)
            if count and dtype.itemsize:
                into = memoryview(array.view(np.uint8))
                done = 0
                while done < len(into):
                    chunk = member.read(min(READ_STEP, len(into) - done))
                    if not chunk:
                        raise EOFError(f"ends after {offset + done:,} bytes")
                    into[done : done + len(chunk)] = chunk
                    done += len(chunk)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, RuntimeError) as e:
        raise InputError(f"{path}: cannot read input '{key}': {_reason(e)}") from None
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


def _reason(error):
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:200]


def check_input(key, spec, value):
    """``value`` converted to what TensorFlow expects for input ``key``, or InputError naming the mismatch."""
    _check_kind(key, spec, value.dtype, value.shape)
    if spec["dtype"] == "string":
        value = (
            np.vectorize(lambda s: s.encode() if isinstance(s, str) else bytes(s), otypes=[object])(value)
            if value.size
            else value.astype(object)
        )
    return value


def _check_kind(key, spec, given, given_shape):
    """InputError unless dtype ``given`` and shape ``given_shape`` are what input ``key`` takes."""
    dtype = spec["dtype"]
    want = NUMPY_DTYPES.get(dtype)
    if dtype == "string":
        if given.kind not in "SU":
            raise InputError(f"input '{key}': expected dtype string, given {given}")
    elif want is None or given != np.dtype(want):
        raise InputError(f"input '{key}': expected dtype {dtype}, given {given}")
    shape = spec["shape"]
    if shape is not None and (
        len(shape) != len(given_shape) or any(d is not None and d != g for d, g in zip(shape, given_shape))
    ):
        expected = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
        raise InputError(f"input '{key}': expected shape {expected}, given {list(given_shape)}")
