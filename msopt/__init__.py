"""msopt: multi-stream graph optimizer for exported TensorFlow models."""

__version__ = "0.1.0"


def __getattr__(name):
    """``msopt.stream`` is loaded on first use, so ``import msopt`` never imports TensorFlow."""
    if name == "stream":
        from importlib import import_module

        return import_module("msopt.stream")
    raise AttributeError(f"module 'msopt' has no attribute {name!r}")
