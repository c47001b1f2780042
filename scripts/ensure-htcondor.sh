#!/usr/bin/env bash
# A private HTCondor pool for Berth's elastic tests and demos: `up`, `down`, `status`, `env`.
#
# HTCondor is not packaged in Debian 12, so the daemons come from Debian 13's `condor` package
# (23.9.6) installed once into a debootstrapped chroot kept in the state dir
# ($BERTH_BATCH_HOME/htcondor, default ~/.cache/berth-batch/htcondor; `install` builds it, `up`
# does too when it is missing). The pool is a personal one without a startd of its own: the
# workers are the startds Berth starts for its "VMs" (berth.elastic.workers.htcondor). Its
# collector and schedd listen on 127.0.0.1:9618 (shared port), where the PyPI `htcondor`
# bindings on the host reach them. Accounting groups and their quotas come from
# BERTH_HTCONDOR_GROUPS ("name=quota,name=quota", default "group_besiii=1,group_juno=1").
#
# Jobs are submitted as the non-root user BERTH_HTCONDOR_USER (default berthjob), which exists
# with the same uid on the host and in the chroot (the schedd refuses jobs owned by root).
# Idempotent: `up` reuses a pool that already answers, `down` stops only what its pid file names.
set -euo pipefail

HOME_DIR=${BERTH_BATCH_HOME:-$HOME/.cache/berth-batch}/htcondor
ROOT=$HOME_DIR/root
RUN=$HOME_DIR/run
PORT=9618
SUITE=trixie
MIRROR=${BERTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CONDOR_VERSION=23.9.6
SUBMIT_USER=${BERTH_HTCONDOR_USER:-berthjob}
GROUPS_SPEC=${BERTH_HTCONDOR_GROUPS:-group_besiii=1,group_juno=1}

say() { echo "ensure-htcondor: $*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    say "$1 needs root (chroot, debootstrap, apt-get)"
    exit 1
  fi
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

install_chroot() {
  if [ -x "$ROOT/usr/sbin/condor_master" ]; then
    return 0
  fi
  need_root "installing HTCondor"
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq debootstrap >/dev/null
  fi
  local partial=$HOME_DIR/root.partial
  umount_all "$partial"
  rm -rf "$partial"
  mkdir -p "$HOME_DIR"
  say "debootstrapping Debian $SUITE into $partial (once; about a minute)"
  debootstrap --variant=minbase "$SUITE" "$partial" "$MIRROR" >"$HOME_DIR/debootstrap.log" 2>&1 ||
    { say "debootstrap failed; see $HOME_DIR/debootstrap.log"; exit 1; }
  say "installing condor $CONDOR_VERSION in the chroot"
  mount_proc "$partial"
  chroot "$partial" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "condor=$CONDOR_VERSION*" >>"$HOME_DIR/debootstrap.log" 2>&1 ||
    { umount_all "$partial"; say "apt-get install condor failed; see $HOME_DIR/debootstrap.log"; exit 1; }
  chroot "$partial" apt-get clean
  umount_all "$partial"
  mv "$partial" "$ROOT"
}

mount_proc() {
  mkdir -p "$1/proc"
  mountpoint -q "$1/proc" || mount -t proc proc "$1/proc" 2>/dev/null || true
}

umount_all() {
  [ -d "$1/proc" ] && mountpoint -q "$1/proc" && umount "$1/proc" 2>/dev/null || true
}

ensure_user() {
  local uid
  if ! getent passwd "$SUBMIT_USER" >/dev/null; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$SUBMIT_USER"
  fi
  uid=$(id -u "$SUBMIT_USER")
  if ! chroot "$ROOT" getent passwd "$SUBMIT_USER" >/dev/null; then
    chroot "$ROOT" groupadd --gid "$(id -g "$SUBMIT_USER")" "$SUBMIT_USER" 2>/dev/null || true
    chroot "$ROOT" useradd --uid "$uid" --gid "$(id -g "$SUBMIT_USER")" --no-create-home \
      --shell /bin/sh "$SUBMIT_USER"
  fi
  mkdir -p "$ROOT/home/$SUBMIT_USER"
  chown "$SUBMIT_USER:" "$ROOT/home/$SUBMIT_USER"
}

group_config() {
  local names="" entry name quota
  IFS=',' read -ra entries <<<"$GROUPS_SPEC"
  for entry in "${entries[@]}"; do
    name=${entry%%=*}
    quota=${entry#*=}
    names="${names:+$names, }$name"
    echo "GROUP_QUOTA_$name = $quota"
  done
  echo "GROUP_NAMES = $names"
}

write_config() {
  mkdir -p "$ROOT/etc/condor/config.d"
  {
    cat <<EOF
# Written by scripts/ensure-htcondor.sh: a personal pool without a startd of its own.
use ROLE : Personal
DAEMON_LIST = MASTER, COLLECTOR, NEGOTIATOR, SCHEDD
CONDOR_HOST = 127.0.0.1
COLLECTOR_HOST = 127.0.0.1:$PORT
NETWORK_INTERFACE = 127.0.0.1
ENABLE_IPV6 = False
USE_SHARED_PORT = True
SHARED_PORT_PORT = $PORT
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, CLAIMTOBE
SEC_CLIENT_AUTHENTICATION_METHODS = FS, CLAIMTOBE
ALLOW_READ = *
ALLOW_WRITE = *
ALLOW_ADMINISTRATOR = *
ALLOW_NEGOTIATOR = *
ALLOW_DAEMON = *
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_MIN_INTERVAL = 1
NEGOTIATOR_CYCLE_DELAY = 1
SCHEDD_INTERVAL = 2
SCHEDD_MIN_INTERVAL = 1
UPDATE_INTERVAL = 2
MOUNT_UNDER_SCRATCH =
GROUP_ACCEPT_SURPLUS = False
GROUP_AUTOREGROUP = False
EOF
    group_config
  } >"$ROOT/etc/condor/config.d/99-berth.conf"
}

master_pid() {
  local pid
  pid=$(cat "$RUN/master.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

pool_answers() {
  chroot "$ROOT" condor_status -schedd -af Name >/dev/null 2>&1 &&
    [ -n "$(chroot "$ROOT" condor_status -negotiator -af Name 2>/dev/null)" ]
}

wait_answers() {
  for _ in $(seq 1 150); do
    pool_answers && return 0
    sleep 0.1
  done
  return 1
}

up() {
  install_chroot
  need_root "starting the pool"
  mkdir -p "$RUN"
  write_config
  if master_pid >/dev/null; then
    wait_answers && { say "pool already up on 127.0.0.1:$PORT"; return 0; }
    say "condor_master runs but the pool does not answer; see $ROOT/var/log/condor"
    exit 1
  fi
  if listening; then
    say "127.0.0.1:$PORT is taken by something this script did not start"
    exit 1
  fi
  ensure_user
  mount_proc "$ROOT"
  for dir in /run/condor /var/lock/condor /var/log/condor /var/lib/condor/spool \
    /var/lib/condor/execute; do
    # Inside the chroot: its /var/lock is a symlink to /run/lock, which must resolve there.
    chroot "$ROOT" mkdir -p "$dir"
    chroot "$ROOT" chown condor:condor "$dir"
  done
  chroot "$ROOT" condor_master -f >"$RUN/master.out" 2>&1 9>&- &
  echo $! >"$RUN/master.pid"
  wait_answers && { say "pool up on 127.0.0.1:$PORT"; return 0; }
  say "the pool did not answer in 15 s; see $ROOT/var/log/condor"
  exit 1
}

down() {
  local pid
  if pid=$(master_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    say "pool stopped"
  fi
  rm -f "$RUN/master.pid"
}

print_env() {
  # What a client needs, as shell assignments (the fixture reads them).
  echo "BERTH_HTCONDOR_ROOT=$ROOT"
  echo "BERTH_HTCONDOR_COLLECTOR=127.0.0.1:$PORT"
  echo "BERTH_HTCONDOR_USER=$SUBMIT_USER"
  echo "BERTH_HTCONDOR_UID=$(id -u "$SUBMIT_USER")"
  echo "BERTH_HTCONDOR_GROUPS=$GROUPS_SPEC"
}

# One `up` or `down` at a time (parallel test workers all call `up`).
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock"
flock 9

case "${1:-up}" in
  install) install_chroot ;;
  up) up ;;
  down) down ;;
  status) master_pid >/dev/null && pool_answers && echo up || { echo down; exit 1; } ;;
  env) print_env ;;
  *) say "usage: $0 [install|up|down|status|env]"; exit 2 ;;
esac
