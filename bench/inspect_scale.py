"""How long `msopt inspect` takes on a 50,000-node model (target: under 2 s), end to end in a fresh process.

Builds a synthetic layered GraphDef (and a TF2-style variant with the same nodes spread over
function bodies) from the protos alone, then times the real command line, best of 3.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from msopt.graph import protos

NODES = 50_000
TARGET_S = 2.0


def layered_graph(nodes, width=50):
    graph = protos.GraphDef()
    for i in range(nodes):
        node = graph.node.add(name=f"layer_{i // width}/op_{i}", op="Placeholder" if i < width else "AddV2")
        if i >= width:
            node.input.extend([graph.node[i - width].name, graph.node[i - width + (1 if i % width else 0)].name])
        node.attr["T"].type = 1
    return graph


def functional_graph(nodes, functions=500):
    """The same amount of work split into per-layer functions, as tf-keras saves it."""
    graph = protos.GraphDef()
    per = nodes // functions
    graph.node.add(name="x", op="Placeholder").attr["dtype"].type = 1
    previous = "x"
    for f in range(functions):
        fdef = graph.library.function.add()
        fdef.signature.name = f"__inference_layer_{f}"
        fdef.signature.input_arg.add(name="x", type=1)
        fdef.signature.output_arg.add(name="y", type=1)
        last = "x"
        for i in range(per - 1):
            n = fdef.node_def.add(name=f"op_{i}", op="AddV2", input=[last, last])
            n.attr["T"].type = 1
            last = f"op_{i}:z:0"
        fdef.ret["y"] = last
        call = graph.node.add(name=f"call_{f}", op="StatefulPartitionedCall", input=[previous])
        call.attr["f"].func.name = fdef.signature.name
        previous = call.name
    return graph


def time_inspect(path):
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "msopt", "inspect", str(path), "--json"], check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for name, graph in (("flat GraphDef", layered_graph(NODES)), ("500 functions", functional_graph(NODES))):
            path = Path(tmp) / f"{name.split()[0]}.pb"
            path.write_bytes(graph.SerializeToString())
            seconds = time_inspect(path)
            rows.append((name, path.stat().st_size, seconds))
        help_s = min(_time([sys.executable, "-m", "msopt", "--help"]) for _ in range(3))
    print(f"msopt inspect, {NODES:,} nodes, best of 3, fresh process each (target < {TARGET_S} s):")
    for name, size, seconds in rows:
        print(
            f"  {name:14} {size / 1e6:5.1f} MB  {seconds:5.2f} s  ({seconds / TARGET_S:.2f} of target)  {'met' if seconds < TARGET_S else 'NOT met'}"
        )
    print(f"msopt --help: {help_s:.2f} s")


def _time(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
