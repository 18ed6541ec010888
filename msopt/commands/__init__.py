"""The msopt commands, one module each: they parse, call the layers below and print."""
