#!/bin/sh
# Initialise $PGDATA on first start the way the official image does, then run postgres.
set -eu

if [ "${1:-}" = "" ] || [ "${1#-}" != "$1" ]; then
    set -- postgres "$@"
fi
if [ "$1" != "postgres" ]; then
    exec "$@"
fi
shift

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:=}"
: "${POSTGRES_HOST_AUTH_METHOD:=}"
: "${POSTGRES_INITDB_ARGS:=}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != "trust" ]; then
        echo "error: database is uninitialized and no POSTGRES_PASSWORD is set" >&2
        echo "       set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust to allow all connections" >&2
        exit 1
    fi
    pwfile=""
    if [ -n "$POSTGRES_PASSWORD" ]; then
        pwfile="$(mktemp)"
        printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    fi
    # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of words, as in the official image
    initdb -D "$PGDATA" --username="$POSTGRES_USER" --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust ${pwfile:+--pwfile="$pwfile"} $POSTGRES_INITDB_ARGS
    [ -z "$pwfile" ] || rm -f "$pwfile"
    printf 'host all all all %s\n' "${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != "postgres" ]; then
        printf 'CREATE DATABASE "%s";\n' "$POSTGRES_DB" | postgres --single -j -D "$PGDATA" postgres > /dev/null
    fi
    echo "PostgreSQL init process complete; ready for start up."
fi

exec postgres -c listen_addresses='*' "$@"
