"""Lanes, request-level concurrency: the lanes SavedModel writer (model), K lanes of one model in one process
(lanes), C client threads over them (load), and tune's measure of lane counts (tune)."""
