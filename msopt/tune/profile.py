"""Measured per-op costs of the one-stream model: real traced steps (the runner's --profile path), as a costs file."""

import json

from msopt.files.outputs import write_bytes
from msopt.runner.trace import costs_document, executed_names


def profile(runner, signature, feeds, steps, path):
    """Trace ``steps`` steps of ``runner``'s signature on ``feeds``, write the costs file to ``path``; returns it.

    The file is the one ``msopt run --profile`` writes and ``msopt partition --costs`` reads:
    ``{"unit": "us", "steps": K, "ops": {node key: mean us}}``.
    """
    runner.session_executable.run(signature, feeds)  # one untraced step first: graph optimization, allocations
    metadata = runner.traced_steps(signature, feeds, steps)
    document, unmapped = costs_document(metadata, executed_names(runner.view))
    write_bytes(path, json.dumps(document, indent=2).encode())
    return {"path": str(path), "ops": len(document["ops"]), "unmapped_executed_nodes": unmapped}, document
