"""Running models: devices, the executable, the timing loop, the stage pipeline, replicas and MPS, traces, verify."""
