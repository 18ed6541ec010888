"""msopt: multi-stream graph optimizer for exported TensorFlow models.

The Python API (msopt.inspect, msopt.partition, msopt.simulate; errors msopt.InputError,
msopt.CheckFailed, msopt.VerifyFailed) and ``msopt.stream`` are loaded on first use, so
``import msopt`` never imports TensorFlow.
"""

import sys
import types

__version__ = "0.1.0"

API = {
    "inspect": "msopt.api",
    "partition": "msopt.api",
    "simulate": "msopt.api",
    "stream": None,
    "InputError": "msopt.errors",
    "CheckFailed": "msopt.errors",
    "VerifyFailed": "msopt.errors",
}
__all__ = ["__version__", *API]


def __getattr__(name):
    if name not in API:
        raise AttributeError(f"module 'msopt' has no attribute {name!r}")
    from importlib import import_module

    if API[name] is None:
        return import_module(f"msopt.{name}")
    return getattr(import_module(API[name]), name)


class _Package(types.ModuleType):
    """Importing the modules msopt.inspect, msopt.partition or msopt.simulate must not hide the API functions
    of the same names: Python binds a submodule to its package's attribute once imported; these stay unbound
    (``from msopt.simulator.simulate import ...`` and ``import msopt.simulator.simulate`` still work, through sys.modules)."""

    def __setattr__(self, name, value):
        if API.get(name) == "msopt.api" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
