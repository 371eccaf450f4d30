#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the distributed-search tests.
#
#   tests/services/postgres.sh start DIR   # prints the SQLAlchemy URL of a fresh database
#   tests/services/postgres.sh stop DIR    # stops the server and removes DIR
#
# Installs Debian's `postgresql` package with apt-get when no initdb is found under
# /usr/lib/postgresql/*/bin/ (CI runs on a fresh machine). initdb refuses to run as root, so as
# root the cluster belongs to the `postgres` user the package creates. Exits non-zero with one
# line on stderr when PostgreSQL cannot be installed or started.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

install_postgres() {
    [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed and we are not root to apt-get install it"
    command -v apt-get >/dev/null || die "PostgreSQL is not installed and apt-get is missing"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends postgresql; } >&2 \
        || die "apt-get install postgresql failed"
}

as_owner() {  # run a command as the cluster's owner (postgres when we are root)
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local dir=$1 bin port
    bin=$(find_bin)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then install_postgres; bin=$(find_bin); fi
    [ -n "$bin" ] && [ -x "$bin/initdb" ] || die "no initdb under /usr/lib/postgresql/*/bin after install"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -A trust -U palm --no-sync >"$dir/initdb.log" 2>&1 \
        || die "initdb failed (see $dir/initdb.log)"
    port=$(free_port)
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100" start >&2 \
        || die "pg_ctl start failed (see $dir/server.log)"
    echo "$bin" >"$dir/bin"
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U palm palm_test || die "createdb failed"
    echo "postgresql+psycopg2://palm@127.0.0.1:$port/palm_test"
}

stop() {
    local dir=$1
    if [ -f "$dir/bin" ]; then
        as_owner "$(cat "$dir/bin")/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 || true
    fi
    rm -rf "$dir"
}

case "${1:-}" in
    start) start "${2:?usage: postgres.sh start DIR}" ;;
    stop) stop "${2:?usage: postgres.sh stop DIR}" ;;
    *) die "usage: postgres.sh start|stop DIR" ;;
esac
