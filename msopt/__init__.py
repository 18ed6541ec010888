"""msopt: multi-stream graph optimizer for exported TensorFlow models."""

__version__ = "0.1.0"
