#!/bin/sh
# Regenerates the pictures of the README's "Visualizing a partition" section (needs graphviz; chromium for the report shot).
# Run from the repository root. NASNET may name a tf-keras NASNetMobile SavedModel (weights=None) to redraw that picture too.
set -e
out=docs/images
msopt visualize sample_models/linreg_tf1 -o $out/linreg_tf1.svg
msopt visualize sample_models/towers_tf2 --policy towers --streams 2 -o $out/towers_tf2.svg
msopt visualize sample_models/deepfm_tf1 --policy embedding --streams 4 -o $out/deepfm_tf1_embedding.svg
msopt visualize sample_models/stage_tf1 --policy stage --streams 2 -o $out/stage_tf1.svg
if [ -n "$NASNET" ]; then
  msopt visualize "$NASNET" --policy chains --streams 4 -o $out/nasnet_mobile_chains.svg
fi
if command -v chromium >/dev/null; then
  report=$(mktemp -d)
  msopt visualize sample_models/towers_tf2 --policy towers --streams 2 -o "$report/towers.html"
  chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --user-data-dir="$report/profile" --window-size=1100,1500 --screenshot="$out/towers_tf2_report.png" \
    "file://$report/towers.html" 2>/dev/null
  rm -rf "$report"
fi
