"""Input batches for a model's signatures: generated from what the graph says each input feeds, or read from an .npz.

One generator serves ``partition --verify``, ``run`` and the tests. Generated values follow the
graph (msopt.input_needs): ids stay below the row count of the tables they index, control-flow
predicates are scalars, strings take the form their parsers expect. An .npz file is data only:
it is opened without pickle support and only the arrays the signature needs are read.
"""

import zipfile
import zlib

import numpy as np

from msopt.errors import InputError

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


class InputGenerator:
    """Random batches for a signature's inputs ({key: spec}); ``view`` (a GraphView) lets the graph shape them."""

    def __init__(self, inputs, view=None):
        from msopt.input_needs import Need, input_needs

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
    from msopt.protos import Example

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

    The file is data, never code: no pickle, and only the arrays the signature needs are read.
    """
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: cannot read inputs: not an .npz file ({_reason(e)})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InputError(f"{path}: cannot read inputs: a single .npy array, not an .npz file of named arrays")
    with data:
        missing = sorted(set(inputs) - set(data.files))
        if missing:
            raise InputError(
                f"{path}: no array for input '{missing[0]}' (the signature needs: {', '.join(sorted(inputs))})"
            )
        arrays = {}
        for key in sorted(inputs):
            try:
                arrays[key] = data[key]
            except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
                raise InputError(f"{path}: cannot read input '{key}': {_reason(e)}") from None
    return {key: check_input(key, inputs[key], arrays[key]) for key in sorted(inputs)}


def read_signature_inputs(model, path):
    """{signature: batch} from one .npz for every signature a model declares (no TensorFlow needed)."""
    from msopt.contents import signatures

    return {name: read_npz(path, spec["inputs"]) for name, spec in signatures(model).items()}


def _reason(error):
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:200]


def check_input(key, spec, value):
    """``value`` converted to what TensorFlow expects for input ``key``, or InputError naming the mismatch."""
    dtype = spec["dtype"]
    want = NUMPY_DTYPES.get(dtype)
    given = value.dtype
    if dtype == "string":
        if given.kind not in "SU":
            raise InputError(f"input '{key}': expected dtype string, given {given}")
        value = (
            np.vectorize(lambda s: s.encode() if isinstance(s, str) else bytes(s), otypes=[object])(value)
            if value.size
            else value.astype(object)
        )
    elif want is None or given != np.dtype(want):
        raise InputError(f"input '{key}': expected dtype {dtype}, given {given}")
    shape = spec["shape"]
    if shape is not None and (
        len(shape) != value.ndim or any(d is not None and d != g for d, g in zip(shape, value.shape))
    ):
        expected = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
        raise InputError(f"input '{key}': expected shape {expected}, given {list(value.shape)}")
    return value
