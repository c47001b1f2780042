#!/usr/bin/env bash
# Real OpenStack for Berth's tests and benchmarks: two independent clusters ("cluster1",
# "cluster2") on this machine, each with Placement, Glance, nova-api, nova-conductor,
# nova-scheduler and nova-compute services on Nova's fake virt driver (one host each), a
# Neutron stand-in, its own databases on PostgreSQL and its own RabbitMQ vhost (docs/openstack.md).
#
#   scripts/ensure-openstack.sh up [CLUSTER...]    start what is not running; print the JSON path
#   scripts/ensure-openstack.sh down [CLUSTER...]  stop the services (data and venv are kept)
#
# The services live in their own venv under $BERTH_OPENSTACK_HOME (default
# ~/.cache/berth-openstack), installed once from PyPI with the exact pins of
# scripts/openstack/requirements.txt (Nova's pins would fight Berth's). `up` writes
# $BERTH_OPENSTACK_HOME/clusters.json (endpoints, token, RabbitMQ transport URL per cluster).
# Idempotent; runs are serialised by a lock file.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export BERTH_OPENSTACK_HOME=${BERTH_OPENSTACK_HOME:-$HOME/.cache/berth-openstack}
VENV=$BERTH_OPENSTACK_HOME/venv
REQS=$HERE/openstack/requirements.txt
PYTHON=${BERTH_OPENSTACK_PYTHON:-python3}
ACTION=${1:-up}
shift || true

say() { echo "ensure-openstack: $*" >&2; }

mkdir -p "$BERTH_OPENSTACK_HOME"
exec 9>"$BERTH_OPENSTACK_HOME/lock"
flock 9

if [ "$ACTION" = down ]; then
  if [ -x "$VENV/bin/python" ]; then
    cd "$HERE/openstack" && exec "$VENV/bin/python" stack.py down "$@"
  fi
  exit 0
fi

rabbit_up() { rabbitmqctl -q status >/dev/null 2>&1; }

ensure_rabbit() {
  rabbit_up && return 0
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    say "installing rabbitmq-server from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq rabbitmq-server >/dev/null
  fi
  rabbit_up && return 0
  say "starting RabbitMQ"
  rabbitmq-server -detached
  for _ in $(seq 1 120); do
    rabbit_up && return 0
    sleep 1
  done
  say "RabbitMQ did not start"
  return 1
}

ensure_venv() {
  local stamp=$VENV/.installed want
  want=$(sha256sum "$REQS" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  say "installing the OpenStack services into $VENV (once; about a minute)"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip
  "$VENV/bin/pip" install --quiet -r "$REQS"
  echo "$want" >"$stamp"
}

"$HERE/ensure-postgres.sh"
ensure_rabbit
ensure_venv
cd "$HERE/openstack"
exec "$VENV/bin/python" stack.py up "$@"
