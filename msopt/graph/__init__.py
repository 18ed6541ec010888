"""The graph layer: a loaded model's graph as msopt reads it. The view over the main graph and every function
body (view), the schema's protos (protos), the flattened run of a signature (flat, run_order, tasks), the
topological orders (order), the op tables, the input checks (validate), what a model holds (contents), the
host-only ops, and which inputs a run needs (input_needs)."""
