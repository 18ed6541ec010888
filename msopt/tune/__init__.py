"""msopt tune: plan candidates from measured per-op costs, measure them for real, keep the fastest verified one."""
