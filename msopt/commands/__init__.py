"""The msopt commands, one module each: they parse options, call the plan layer and print."""
