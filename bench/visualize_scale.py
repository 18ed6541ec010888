"""How long `msopt visualize` takes on NASNetMobile (target: model to folded SVG in at most 20 s), beside the unfolded drawing.

Times the real command line in fresh processes (best of 3): the default folded view of the
model's own streams, and the same view partitioned on the fly by policy auto on 4 streams. Then,
in this process, where the time goes (load, signature ops, folding, dot), and for comparison the
raw drawing of every op and edge with no folding, laid out by the same dot (stopped after
--unfolded-timeout seconds). Prints the figures and the ratio; exits 1 if the target is missed.

    python bench/visualize_scale.py
    python bench/visualize_scale.py --model path/to/saved_model --unfolded-timeout 60 --json
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

TARGET_S = 20.0


def cli_seconds(args, repeats):
    """Best wall time of the command line over ``repeats`` fresh processes."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "msopt", "visualize", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        elapsed = time.perf_counter() - started
        if result.returncode != 0:
            raise SystemExit(f"msopt visualize failed: {result.stderr.strip()}")
        best = min(best, elapsed)
    return best


def breakdown(model_path, out_dir):
    """Seconds per step of the folded view, in this process."""
    from msopt import visualize as draw
    from msopt.graph.view import GraphView
    from msopt.load import load

    steps = {}
    t = time.perf_counter()
    model = load(model_path)
    view = GraphView(model.graph_def)
    steps["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ops, edges, _ = draw.signature_ops(model, view)
    steps["signature_ops_s"] = time.perf_counter() - t
    t = time.perf_counter()
    root, streams = draw.fold(ops, edges, {})
    text = draw.to_dot(ops, edges, root, streams, draw.legend_rows(streams, 1), "NASNetMobile")
    steps["fold_and_dot_text_s"] = time.perf_counter() - t
    t = time.perf_counter()
    draw.render(text, "svg", os.path.join(out_dir, "folded.svg"))
    steps["graphviz_s"] = time.perf_counter() - t
    drawn = len(re.findall(r"^\s+[bo]\d+ \[", text, re.M))
    return steps, ops, edges, view, drawn


def unfolded_seconds(ops, edges, out_dir, timeout):
    """(seconds, SVG bytes) of dot on the raw graph (one node per op, every edge); None when stopped at ``timeout``."""
    lines = ["digraph raw {", "  node [shape=box, fontsize=8];"]
    lines += [f'  n{i} [label="{op.path[-1]}"];' for i, op in enumerate(ops)]
    lines += [f"  n{s} -> n{d};" for s, d, _ in edges]
    lines.append("}")
    path = os.path.join(out_dir, "raw.dot")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    started = time.perf_counter()
    try:
        subprocess.run(
            ["dot", "-Tsvg", path, "-o", os.path.join(out_dir, "raw.svg")],
            check=True,
            timeout=timeout,
            capture_output=True,
        )
    except subprocess.TimeoutExpired:
        return None, None
    return time.perf_counter() - started, os.path.getsize(os.path.join(out_dir, "raw.svg"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=None, help="SavedModel to draw (default: tf-keras NASNetMobile, weights=None, cached)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--unfolded-timeout", type=float, default=120.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.model is None:
        from conftest import keras_application

        args.model = str(keras_application("NASNetMobile"))
    with tempfile.TemporaryDirectory() as out_dir:
        svg = os.path.join(out_dir, "nasnet.svg")
        folded = cli_seconds([args.model, "-o", svg], args.repeats)
        svg_bytes = os.path.getsize(svg)
        auto = cli_seconds([args.model, "--policy", "auto", "--streams", "4", "-o", svg], args.repeats)
        steps, ops, edges, view, drawn = breakdown(args.model, out_dir)
        raw, raw_bytes = unfolded_seconds(ops, edges, out_dir, args.unfolded_timeout)
    figures = {
        "model": args.model,
        "nodes_in_model": len(view.nodes),
        "functions": len(view.functions),
        "ops_in_signature": len(ops),
        "edges_in_signature": len(edges),
        "boxes_and_ops_drawn": drawn,
        "folded_svg_s": round(folded, 2),
        "folded_svg_auto_4_streams_s": round(auto, 2),
        "svg_bytes": svg_bytes,
        **{k: round(v, 3) for k, v in steps.items()},
        "unfolded_dot_s": round(raw, 2) if raw is not None else None,
        "unfolded_svg_bytes": raw_bytes,
        "unfolded_timeout_s": args.unfolded_timeout,
        "target_s": TARGET_S,
    }
    slowest = max(folded, auto)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        dot_folded = steps["graphviz_s"]
        raw_text = (
            f"{len(ops)} nodes, dot {raw:.2f} s ({raw / dot_folded:.0f}x the folded view's {dot_folded:.2f} s), "
            f"{raw_bytes // 1024} KiB of SVG"
            if raw is not None
            else f"{len(ops)} nodes, dot stopped after {args.unfolded_timeout:.0f} s"
        )
        print(
            f"NASNetMobile: {figures['nodes_in_model']} nodes in {figures['functions']} functions; "
            f"the serving signature runs {len(ops)} ops, {len(edges)} edges"
        )
        print(
            f"  folded view, model to SVG (command line, best of {args.repeats}): {folded:.2f} s "
            f"(target {TARGET_S:.0f} s); {drawn} boxes and ops drawn, {svg_bytes // 1024} KiB"
        )
        print(f"  with policy auto on 4 streams (planning and simulation included): {auto:.2f} s")
        print("  in-process steps: " + ", ".join(f"{k[:-2]} {v:.2f} s" for k, v in steps.items()))
        print(f"  unfolded: dot on every op and edge: {raw_text}")
    return 0 if slowest <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
