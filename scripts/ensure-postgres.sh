#!/usr/bin/env bash
# Make a PostgreSQL server available on 127.0.0.1:5432 for Berth's tests (user postgres, no
# password from loopback). Uses a server that is already running; otherwise starts Debian's
# cluster; otherwise installs PostgreSQL from Debian's packages and starts it. Idempotent.
#
# Fresh Debian installs refuse password-less TCP logins; on a cluster this script started it
# adds one `trust` line for 127.0.0.1/32 to pg_hba.conf (a test machine, loopback only).
set -euo pipefail

HOST=127.0.0.1
PORT=${BERTH_PG_PORT:-5432}

say() { echo "ensure-postgres: $*" >&2; }

listening() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

can_login() {
  command -v psql >/dev/null 2>&1 &&
    psql -h "$HOST" -p "$PORT" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1
}

wait_listening() {
  for _ in $(seq 1 60); do
    listening && return 0
    sleep 0.5
  done
  return 1
}

cluster_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1; }

start_cluster() {
  local v
  v=$(cluster_version)
  [ -n "$v" ] || return 1
  say "starting the Debian cluster $v/main"
  pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
  wait_listening
}

allow_loopback() {
  local v hba
  v=$(cluster_version)
  hba="/etc/postgresql/$v/main/pg_hba.conf"
  [ -f "$hba" ] || return 1
  if ! grep -q '^host all postgres 127.0.0.1/32 trust' "$hba"; then
    say "allowing password-less loopback logins for postgres in $hba"
    sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$v" main reload
  sleep 1
}

if listening && can_login; then
  say "using the server already running on $HOST:$PORT"
  exit 0
fi

if ! listening; then
  if [ -z "$(cluster_version)" ]; then
    if [ "$(id -u)" != 0 ]; then
      say "PostgreSQL is not installed and installing it needs root"
      exit 1
    fi
    say "installing PostgreSQL from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
  fi
  start_cluster || { say "could not start PostgreSQL"; exit 1; }
fi

if ! can_login; then
  allow_loopback || true
fi

if can_login; then
  say "PostgreSQL ready on $HOST:$PORT"
  exit 0
fi
say "PostgreSQL listens on $HOST:$PORT but user postgres cannot log in without a password"
exit 1
