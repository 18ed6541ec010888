#!/usr/bin/env bash
# Set everything up, then run the whole test suite (two test processes: most tests wait on TensorFlow
# subprocesses, so two halve the wall time on a 2-core machine; extra pytest arguments pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pytest -q -p no:cacheprovider -n "${MSOPT_TEST_PROCESSES:-2}" "$@"
