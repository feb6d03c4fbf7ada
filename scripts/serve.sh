#!/usr/bin/env bash
# `make serve`: the LangGraph dev server on 127.0.0.1:PORT, then, once it answers, the address
# of the chat page with the server's token in it (printed after the server's own banner, where
# it is seen). The token is `crag server-token`'s (.crag/server-token, made on first use), or
# CRAG_SERVER_TOKEN when set; every caller but /ok must present it (docs/security.md).
# STUDIO=1 also lists LangGraph Studio's origin (https://smith.langchain.com) in
# CRAG_SERVER_ORIGINS and prints Studio's address for this server: the origin only lets Studio's
# page read the answers; every request still needs the token (X-Api-Key), as from anywhere.
# Usage: [STUDIO=1] scripts/serve.sh PORT JOBS BATCH
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-8123}" jobs="${2:-10}" batch="${3:-1}"
token="$(.venv/bin/crag server-token)"
studio_origin="https://smith.langchain.com"
if [ "${STUDIO:-}" = 1 ]; then
    export CRAG_SERVER_ORIGINS="${CRAG_SERVER_ORIGINS:+$CRAG_SERVER_ORIGINS,}$studio_origin"
fi
LANGGRAPH_CLI_NO_ANALYTICS=1 CRAG_GENERATOR_BATCH_SIZE="$batch" CRAG_SERVER_TOKEN="$token" \
    .venv/bin/langgraph dev --no-browser --host 127.0.0.1 --port "$port" \
    --n-jobs-per-worker "$jobs" &
server=$!
trap 'kill -INT "$server" 2>/dev/null; wait "$server"' INT TERM
for _ in $(seq 1 300); do
    if ! kill -0 "$server" 2>/dev/null; then
        wait "$server"
        exit $?
    fi
    if .venv/bin/python -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
        "http://127.0.0.1:$port/ok" 2>/dev/null; then
        printf '\ncrag chat page: http://127.0.0.1:%s/chat/?token=%s  (open it in a browser)\n' \
            "$port" "$token"
        if [ "${STUDIO:-}" = 1 ]; then
            printf 'LangGraph Studio: %s/studio/?baseUrl=http://127.0.0.1:%s  (its requests need the token as X-Api-Key)\n' \
                "$studio_origin" "$port"
        fi
        printf '\n'
        break
    fi
    sleep 1
done
wait "$server"
