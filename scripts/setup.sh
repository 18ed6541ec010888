#!/usr/bin/env bash
# Install what msopt needs on a fresh Debian/Ubuntu machine: graphviz and Open MPI (openmpi-bin, with
# libopenmpi-dev to build mpi4py; for run --launcher mpirun), chromium for the HTML report's browser
# test, then msopt with TensorFlow (CPU) and the test tools.
# Idempotent; uses sudo for apt when not root.
set -euo pipefail
cd "$(dirname "$0")/.."

want_browser=${MSOPT_WITH_BROWSER:-1}
packages=(graphviz openmpi-bin libopenmpi-dev gcc)
[ "$want_browser" = 1 ] && packages+=(chromium)

missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "installing ${missing[*]} with apt-get" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "warning: no apt-get; install ${missing[*]} yourself (graphviz gives 'dot')" >&2
  fi
fi

python3 -m pip install -q --disable-pip-version-check -e ".[test]"

# Compile msopt's bytecode, as pip does for a package it installs (not for an editable one): each command then
# reads its modules instead of compiling them again (every run, where PYTHONDONTWRITEBYTECODE is set).
python3 -m compileall -q msopt

# Compile the planner's loops ahead of time into msopt/_loops (gcc links it), so that no run loads numba;
# then once just in time too (numba keeps them in its on-disk cache), for runs with MSOPT_PREBUILT=0 and
# tests waiting on a subprocess that compare both forms.
python3 -m msopt.prebuild
MSOPT_PREBUILT=0 python3 -m msopt simulate sample_models/deepfm_tf1 --streams 4 > /dev/null
