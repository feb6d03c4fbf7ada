#!/usr/bin/env bash
# Start crag's cluster on 127.0.0.1 (docs/deployment.md): PostgreSQL 15, Redis, a Chroma server,
# REPLICAS Aegra replicas serving crag, nginx in front; then print the chat page's address.
# Everything lives in one state folder; deploy/cluster/stop.sh stops it. Needs
# scripts/install_cluster.sh first (`make cluster` runs both).
#   REPLICAS=2             Aegra replicas
#   CLUSTER_PORT=8200      nginx; PostgreSQL +1, Redis +2, Chroma +3, replica i +10+i
#   CRAG_CLUSTER_DIR       the state folder (.crag/cluster)
#   CRAG_CLUSTER_VENV      the Python 3.12 environment (.crag/py312)
#   CRAG_SERVER_TOKEN      the token (else one made once, kept in the state folder)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
STATE="$(realpath -m "${CRAG_CLUSTER_DIR:-$root/.crag/cluster}")"
venv="$(realpath -m "${CRAG_CLUSTER_VENV:-$root/.crag/py312}")"
replicas="${REPLICAS:-2}"
port="${CLUSTER_PORT:-8200}"
PG_PORT=$((port + 1)) REDIS_PORT=$((port + 2)) CHROMA_PORT=$((port + 3))
CLUSTER_CONFIG="$here/aegra.json"
pg_bin=/usr/lib/postgresql/15/bin
[ -x "$venv/bin/python" ] || { echo "no $venv: run scripts/install_cluster.sh" >&2; exit 1; }
[ -f "$STATE/run/nginx.pid" ] && { echo "a cluster runs from $STATE: stop.sh first" >&2; exit 1; }
umask 077
mkdir -p "$STATE"/{logs,run,nginx/tmp,secrets,chroma,uploads}
chmod 755 "$STATE" "$STATE/nginx"  # PostgreSQL's and nginx's users pass through

# The state folder's secrets, made once: the database's and Redis's passwords, the token.
secret() {
    [ -s "$STATE/secrets/$1" ] || "$venv/bin/python" -c \
        "import secrets; print(secrets.token_urlsafe(32))" >"$STATE/secrets/$1"
    cat "$STATE/secrets/$1"
}
PG_PASSWORD="$(secret postgres)" REDIS_PASSWORD="$(secret redis)"
CRAG_SERVER_TOKEN="${CRAG_SERVER_TOKEN:-$(secret server-token)}"

# Stop what was started if anything below fails.
trap 'echo "start failed: logs in $STATE/logs" >&2; "$here/stop.sh"' ERR

# PostgreSQL runs as the postgres user when started by root (initdb refuses root).
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg="$STATE/postgres"
if [ ! -f "$pg/data/PG_VERSION" ]; then
    mkdir -p "$pg" && chmod 700 "$pg"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$pg"
    as_postgres bash -c "umask 077; cat >'$pg/password'" <<<"$PG_PASSWORD"
    as_postgres "$pg_bin/initdb" -D "$pg/data" -U crag --auth=scram-sha-256 \
        --pwfile="$pg/password" -E UTF8 >>"$STATE/logs/start.log"
    rm -f "$pg/password"
fi
as_postgres "$pg_bin/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w start -o \
    "-p $PG_PORT -h 127.0.0.1 -k $pg -c max_connections=200" >>"$STATE/logs/start.log"
export PGPASSWORD="$PG_PASSWORD"
for db in aegra crag; do
    "$pg_bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U crag -d postgres -tAc \
        "select 1 from pg_database where datname = '$db'" | grep -q 1 ||
        "$pg_bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U crag "$db"
done

# Redis: the run queue and the streams between replicas; nothing in it outlives a run. Its
# password comes on standard input, not in the command line every user sees.
printf 'requirepass %s\n' "$REDIS_PASSWORD" | redis-server - --bind 127.0.0.1 \
    --port "$REDIS_PORT" --save "" --appendonly no --daemonize yes \
    --pidfile "$STATE/run/redis.pid" --logfile "$STATE/logs/redis.log" >>"$STATE/logs/start.log"

# The replicas' environment: the template resolved, kept for `crag users` and added replicas.
set -a
# shellcheck source=cluster.env
. "$here/cluster.env"
set +a
for name in $(grep -oE '^[A-Z_0-9]+' "$here/cluster.env"); do
    printf '%s=%q\n' "$name" "${!name}"
done >"$STATE/cluster.env"

# Wait until URL answers 200 (with the token), or the program of pid file PIDFILE has died.
wait_for() {
    local url="$1" pidfile="$2"
    for _ in $(seq 1 300); do
        kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null || return 1
        "$venv/bin/python" -c "import os, sys, urllib.request as u
key = {'X-Api-Key': os.environ['CRAG_SERVER_TOKEN']}  # not in the command line: ps shows it
u.urlopen(u.Request(sys.argv[1], headers=key), timeout=5)" "$url" 2>/dev/null && return 0
        sleep 1
    done
    return 1
}
# Start a program in the background in folder DIR, its pid in run/NAME.pid.
launch() {
    local name="$1" dir="$2"
    shift 2
    mkdir -p "$dir"
    (cd "$dir" && exec "$@" </dev/null >>"$STATE/logs/$name.log" 2>&1) &
    echo $! >"$STATE/run/$name.pid"
}

launch chroma "$STATE/chroma" "$venv/bin/chroma" run --path "$STATE/chroma" \
    --host 127.0.0.1 --port "$CHROMA_PORT"
wait_for "http://127.0.0.1:$CHROMA_PORT/api/v2/heartbeat" "$STATE/run/chroma.pid"

# The default corpus, written once before any replica starts: crag fills an empty store on a
# run's first use, with no lock between processes. The run also converts the shipped generator
# (cached in ~/.cache/crag) once.
if [ ! -f "$STATE/prefilled" ]; then
    mkdir -p "$STATE/prefill"
    (cd "$STATE/prefill" && "$venv/bin/python" -c "from crag.app.graphs import graph
out = graph.invoke({'question': 'Who painted the Mona Lisa?'}, context={'web_search': False})
print('default corpus written; asked who painted the Mona Lisa:', out['answer'])") \
        >>"$STATE/logs/start.log" 2>&1
    touch "$STATE/prefilled"
fi

# The replicas. The first alone, until it answers: it migrates Aegra's database (two at once
# race to create it); then the others together.
replica() {
    launch "replica-$1" "$STATE/replica-$1" "$venv/bin/python" -m uvicorn aegra_api.main:app \
        --host 127.0.0.1 --port $((port + 10 + $1)) --lifespan on --no-access-log
}
replica 1
wait_for "http://127.0.0.1:$((port + 11))/health" "$STATE/run/replica-1.pid"
upstreams="server 127.0.0.1:$((port + 11)) max_fails=1 fail_timeout=5s; "
for i in $(seq 2 "$replicas"); do
    replica "$i"
    upstreams+="server 127.0.0.1:$((port + 10 + i)) max_fails=1 fail_timeout=5s; "
done
for i in $(seq 2 "$replicas"); do
    wait_for "http://127.0.0.1:$((port + 10 + i))/health" "$STATE/run/replica-$i.pid"
done

sed -e "s|@PORT@|$port|g" -e "s|@STATE@|$STATE|g" -e "s|@UPSTREAMS@|$upstreams|" \
    "$here/nginx.conf.template" >"$STATE/nginx/nginx.conf"
nginx -p "$STATE/nginx" -c "$STATE/nginx/nginx.conf"
sleep 1  # its pid file is written once it runs in the background
wait_for "http://127.0.0.1:$port/health" "$STATE/run/nginx.pid"
trap - ERR
printf '\ncrag cluster (%s replicas): http://127.0.0.1:%s/chat/?token=%s  (open it in a browser)\n' \
    "$replicas" "$port" "$CRAG_SERVER_TOKEN"
