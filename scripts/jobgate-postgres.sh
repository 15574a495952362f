#!/bin/sh
# PostgreSQL for scripts/compose-up.sh's Debian image, honouring the variables of the
# official postgres image: POSTGRES_USER, POSTGRES_DB, POSTGRES_PASSWORD (scram-sha-256),
# PGDATA (/var/lib/postgresql/data), PGPORT (5432). Listens on 127.0.0.1 only.
set -eu
PGDATA=${PGDATA:-/var/lib/postgresql/data}
PGPORT=${PGPORT:-5432}
USER=${POSTGRES_USER:-postgres}
DB=${POSTGRES_DB:-$USER}
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    umask 077
    printf '%s\n' "$POSTGRES_PASSWORD" >/run/postgresql/pw
    chown postgres /run/postgresql/pw
    as_pg "$BIN/initdb" -D "$PGDATA" -U "$USER" --auth=scram-sha-256 \
        --pwfile=/run/postgresql/pw >/dev/null
    rm -f /run/postgresql/pw
    as_pg "$BIN/pg_ctl" -D "$PGDATA" -o "-c listen_addresses= -p $PGPORT -k /run/postgresql" \
        -w start >/dev/null
    if [ "$DB" != postgres ]; then
        PGPASSWORD=$POSTGRES_PASSWORD as_pg psql -h /run/postgresql -p "$PGPORT" -U "$USER" \
            -d postgres -qc "CREATE DATABASE \"$DB\""
    fi
    as_pg "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$BIN/postgres" -D "$PGDATA" \
    -c listen_addresses=127.0.0.1 -p "$PGPORT" -k /run/postgresql
