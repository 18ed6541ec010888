"""The input batches a run feeds: the signature chosen, records generated or read from an .npz and checked."""
import numpy as np

from msopt.errors import InputError
from msopt.runner.executable import NUMPY_DTYPES, random_inputs


def choose_signature(specs, name):
    if not specs:
        raise InputError("the model has no signature to run")
    if name is None:
        if "serving_default" in specs:
            return "serving_default"
        if len(specs) == 1:
            return next(iter(specs))
        raise InputError(f"several signatures ({', '.join(specs)}); choose one with --signature")
    if name not in specs:
        raise InputError(f"unknown signature '{name}'; available: {', '.join(specs)}")
    return name


def make_records(inputs, batch_size, records, seed, npz=None):
    """The input batches to cycle through: ``records`` generated ones, or the one batch read from ``npz``."""
    if npz is None:
        return [random_inputs(inputs, batch_size, seed + k) for k in range(records)]
    return [read_npz(npz, inputs)]


def read_npz(path, inputs):
    """One batch from an .npz file, every input present with the signature's dtype and shape."""
    try:
        with np.load(path, allow_pickle=True) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read inputs: {e}") from None
    missing = sorted(set(inputs) - set(arrays))
    if missing:
        raise InputError(f"{path}: no array for input '{missing[0]}' (the signature needs: {', '.join(sorted(inputs))})")
    return {key: check_input(key, spec, arrays[key]) for key, spec in sorted(inputs.items())}


def check_input(key, spec, value):
    """``value`` converted to what TensorFlow expects for input ``key``, or InputError naming the mismatch."""
    dtype = spec["dtype"]
    want = NUMPY_DTYPES.get(dtype)
    given = value.dtype
    if dtype == "string":
        if given.kind not in "SUO":
            raise InputError(f"input '{key}': expected dtype string, given {given}")
        value = np.vectorize(lambda s: s.encode() if isinstance(s, str) else bytes(s), otypes=[object])(value) \
            if value.size else value.astype(object)
    elif want is None or given != np.dtype(want):
        raise InputError(f"input '{key}': expected dtype {dtype}, given {given}")
    shape = spec["shape"]
    if shape is not None and (len(shape) != value.ndim or any(d is not None and d != g for d, g in zip(shape, value.shape))):
        expected = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
        raise InputError(f"input '{key}': expected shape {expected}, given {list(value.shape)}")
    return value


def batch_of(feeds, default):
    first = next(iter(feeds.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else default
