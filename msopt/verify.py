"""The old import path of msopt.runner.verify, for callers not moved yet."""
from msopt.runner.verify import compare_outputs, verify  # noqa: F401
