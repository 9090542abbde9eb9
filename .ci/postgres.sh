#!/usr/bin/env bash
# Install PostgreSQL from the Debian packages, start it on loopback, and create the user and
# database that the distributed-tuning test (xagents/tests/test_tuning.py) uses.
#
# Usage (from the repository root):
#     export XAGENTS_TEST_POSTGRES_URL="$(.ci/postgres.sh)"
#
# Progress goes to stderr; the only line on stdout is the URL of the test database,
# postgresql://xagents:tune-secret@127.0.0.1:<port>/xagents_tests (a throwaway credential that only
# loopback can use; the test checks that xagents never prints it). When XAGENTS_TEST_POSTGRES_URL is set, the test fails rather than skips if it
# cannot reach that server. Safe to run again: an installed, running server is reused.
set -euo pipefail

user=xagents
password=tune-secret
database=xagents_tests

log() { echo "postgres.sh: $*" >&2; }
if [ "$(id -u)" -eq 0 ]; then
  as_root() { "$@"; }
  as_postgres() { runuser -u postgres -- "$@"; }
else
  as_root() { sudo "$@"; }
  as_postgres() { sudo -u postgres "$@"; }
fi

if ! command -v pg_lsclusters >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  log 'installing postgresql from the Debian packages'
  as_root apt-get update >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2
fi

cluster_line() { pg_lsclusters --no-header | head -n 1; }
if [ -z "$(cluster_line)" ]; then
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  log "creating cluster $version/main"
  as_root pg_createcluster "$version" main >&2
fi
read -r version cluster port status _ <<<"$(cluster_line)"

if [ "$status" != online ]; then
  as_root pg_conftool "$version" "$cluster" set listen_addresses localhost
  log "starting cluster $version/$cluster on localhost:$port"
  as_root pg_ctlcluster "$version" "$cluster" start >&2
fi
for _ in $(seq 60); do
  pg_isready -q -h 127.0.0.1 -p "$port" && break
  sleep 0.5
done
pg_isready -h 127.0.0.1 -p "$port" >&2

sql() { as_postgres psql -p "$port" -v ON_ERROR_STOP=1 -qAtc "$1"; }
if [ "$(sql "SELECT 1 FROM pg_roles WHERE rolname = '$user'")" != 1 ]; then
  sql "CREATE ROLE $user LOGIN"
fi
sql "ALTER ROLE $user PASSWORD '$password'"
if [ "$(sql "SELECT 1 FROM pg_database WHERE datname = '$database'")" != 1 ]; then
  sql "CREATE DATABASE $database OWNER $user"
fi
log "ready: database $database for user $user on 127.0.0.1:$port"
echo "postgresql://$user:$password@127.0.0.1:$port/$database"
