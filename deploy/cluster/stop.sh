#!/usr/bin/env bash
# Stop crag's cluster (deploy/cluster/start.sh), each program by its pid file: nginx first, then
# the replicas (SIGTERM: each finishes the runs it is executing, up to Aegra's 30 s drain), the
# Chroma server, Redis, PostgreSQL. The state folder (CRAG_CLUSTER_DIR, .crag/cluster) stays.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
STATE="$(realpath -m "${CRAG_CLUSTER_DIR:-$here/../../.crag/cluster}")"

# SIGTERM the program of pid file $1, wait up to $2 seconds, then SIGKILL it.
stop_pid() {
    local file="$1" grace="$2" pid
    [ -f "$file" ] || return 0
    pid="$(cat "$file")"
    if kill -TERM "$pid" 2>/dev/null; then
        for _ in $(seq 1 $((grace * 5))); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$pid" 2>/dev/null && echo "killed $(basename "$file" .pid) after ${grace}s"
    fi
    rm -f "$file"
}

stop_pid "$STATE/run/nginx.pid" 10
for file in "$STATE"/run/replica-*.pid; do
    stop_pid "$file" 40 &
done
wait
stop_pid "$STATE/run/chroma.pid" 10
stop_pid "$STATE/run/redis.pid" 10
if [ -f "$STATE/postgres/data/postmaster.pid" ]; then
    as=()
    [ "$(id -u)" -ne 0 ] || as=(runuser -u postgres --)
    "${as[@]}" /usr/lib/postgresql/15/bin/pg_ctl -D "$STATE/postgres/data" stop -m fast >/dev/null
fi
echo "crag cluster stopped ($STATE)"
