#!/usr/bin/env bash
# Lint, format check and type check (configured in pyproject.toml). `ruff format .` fixes the format.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy
