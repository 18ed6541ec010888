"""The planning layer: a plan of streams for every op (plan.make_plan), after the rules (msopt.rules) and the
auto search, through the constraints (constraints, links, link_groups, fusion, xla_clusters, placed_streams),
the Const copies (const_copies) and the run as emit writes it (written_run)."""
