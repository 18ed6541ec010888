#!/usr/bin/env bash
# Set everything up, then show msopt's job on a bundled model: partition it onto 4 streams, compare the
# simulated run before and after, draw the plan, and verify the rewrite bitwise in TensorFlow (CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
MSOPT_WITH_BROWSER=0 bash scripts/setup.sh
work=$(mktemp -d)
model=sample_models/bilinear_tf1  # four branches of bilinear pooling: long, narrow contractions
out=$work/bilinear_ms4
set -x
msopt inspect "$model"
msopt partition "$model" --streams 4 --target h100 --batch-size 4 \
    --placement device --device-type cpu -o "$out" --report "$work/report.json" --verify
msopt visualize "$out" --target h100 --batch-size 4 -o "$work/bilinear_ms4.svg"
{ set +x; } 2>/dev/null
python3 - "$work/report.json" "$work/bilinear_ms4.svg" <<'EOF'
import json, sys

doc = json.load(open(sys.argv[1]))
sim, check = doc["simulated"], doc["verify"]
used = sum(1 for n in doc["nodes_per_stream"] if n)
print(f"\nSimulated on {sim['target']} at batch size {sim['batch_size']} (msopt's cost model, not a measurement):")
print(f"  {'before: one stream':<28}{sim['single_stream_ms']:.3f} ms")
lo, hi = sim["speedup_range"]
print(f"  {f'after:  the plan, {used} streams':<28}{sim['makespan_ms']:.3f} ms  ({sim['speedup']:.2f}x faster; "
      f"{lo:.2f}x-{hi:.2f}x over the host assumptions)")
print(f"Picture of the plan: {sys.argv[2]}")
state = "bitwise identical" if check["ok"] else "DIFFERENT"
print(f"Verified in TensorFlow on the CPU: outputs {state} to the original's "
      f"({len(check['signatures'])} signature, {check['devices']} logical devices)")
print(f"Rewritten model: {doc['output']}")
EOF
