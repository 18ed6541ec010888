"""The input batches a run feeds: the signature chosen, records generated from the graph or read from an .npz."""

from msopt.errors import InputError
from msopt.files.inputs import InputGenerator, read_npz


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


def make_records(inputs, batch_size, records, seed, npz=None, view=None):
    """The input batches to cycle through: ``records`` generated ones (shaped by the graph ``view``),
    or the one batch read from ``npz``."""
    if npz is None:
        generate = InputGenerator(inputs, view)
        return [generate(batch_size, seed + k) for k in range(records)]
    return [read_npz(npz, inputs)]


def batch_of(feeds, default):
    first = next(iter(feeds.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else default
