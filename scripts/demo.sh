#!/usr/bin/env bash
# Set everything up, then partition a bundled sample model onto 2 streams and verify it in TensorFlow.
set -euo pipefail
cd "$(dirname "$0")/.."
MSOPT_WITH_BROWSER=0 bash scripts/setup.sh
out=$(mktemp -d)/deepfm_tf1_ms2
set -x
msopt inspect sample_models/deepfm_tf1
msopt partition sample_models/deepfm_tf1 --streams 2 --placement device --device-type cpu -o "$out" --verify
