"""The simulator layer: each op instance's time on a target GPU and host (targets, kernels, shapes, cost,
host_model) and a discrete-event simulation of a plan on N streams (simulate, task_arrays, event_loop, bound,
list_schedule; the trace-event timeline: timeline), its ranges (uncertainty) and requests in flight
(concurrency)."""
