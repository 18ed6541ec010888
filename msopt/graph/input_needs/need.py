"""What one signature input must hold: the record the input walk fills in."""

from dataclasses import dataclass, field


@dataclass
class Need:
    """What one input must hold. ``bound``: ids in [0, bound); ``unknown``: a lookup whose table size the
    graph does not record; ``scalar``: a control-flow predicate; ``text``: the string format, e.g.
    ("number", "int"), ("csv", [dtypes], delimiter), ("split", delimiter, inner text), ("opaque", op, node),
    ("example", [(feature key, dtype, value count or None, Need of the parsed values)]) for a tf.Example."""

    bound: int = None
    unknown: str = None
    scalar: bool = False
    text: tuple = None
    shape: list = None  # for an input of unknown rank: the shape a consumer needs (None: the batch dimension)
    sinks: list = field(default_factory=list)  # node keys that set the bound

    def limit(self, bound, key):
        if bound is not None and bound > 0 and (self.bound is None or bound < self.bound):
            self.bound = bound
            self.sinks.append(key)
