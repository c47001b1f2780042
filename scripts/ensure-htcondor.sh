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
# Private pools (BERTH_HTCONDOR_POOL=<name>, BERTH_HTCONDOR_PORT=<port>): the same chroot, but
# the pool's own configuration, logs, spool, locks and workers under /var/lib/berth-pools/<name>
# in it, its own port, and config.d left unread, so a test session has a pool no other session's
# workers or jobs touch; `destroy` stops such a pool and its workers and removes its files.
# Without BERTH_HTCONDOR_POOL the script runs the one shared pool (/etc/condor in the chroot).
#
# Jobs are submitted as the non-root user BERTH_HTCONDOR_USER (default berthjob), which exists
# with the same uid on the host and in the chroot (the schedd refuses jobs owned by root).
# Idempotent: `up` reuses a pool that already answers, `down` stops only what its pid file names.
set -euo pipefail

HOME_DIR=${BERTH_BATCH_HOME:-$HOME/.cache/berth-batch}/htcondor
ROOT=$HOME_DIR/root
POOL=${BERTH_HTCONDOR_POOL:-}
PORT=${BERTH_HTCONDOR_PORT:-9618}
if [ -n "$POOL" ]; then
  case $POOL in *[!A-Za-z0-9_-]*) echo "ensure-htcondor: bad pool name '$POOL'" >&2; exit 2 ;; esac
  POOL_DIR=/var/lib/berth-pools/$POOL # inside the chroot
  CONFIG=$POOL_DIR/condor_config
  WORKERS=$POOL_DIR/workers
  RUN=$HOME_DIR/pools/$POOL
else
  POOL_DIR=
  CONFIG=/etc/condor/condor_config
  WORKERS=/var/lib/berth-workers
  RUN=$HOME_DIR/run
fi
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

pool_settings() {
  cat <<EOF
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
}

write_config() {
  if [ -z "$POOL" ]; then
    mkdir -p "$ROOT/etc/condor/config.d"
    {
      echo "# Written by scripts/ensure-htcondor.sh: a personal pool without a startd of its own."
      pool_settings
    } >"$ROOT/etc/condor/config.d/99-berth.conf"
    return 0
  fi
  mkdir -p "$ROOT$POOL_DIR"
  {
    cat <<EOF
# Written by scripts/ensure-htcondor.sh: private pool $POOL (its own dirs and port; the
# shared pool's config.d is not read).
include : /etc/condor/condor_config
use security:recommended_v9_0
LOCAL_CONFIG_DIR =
LOCAL_CONFIG_FILE =
LOCAL_DIR = $POOL_DIR
RUN = \$(LOCAL_DIR)/run
LOG = \$(LOCAL_DIR)/log
LOCK = \$(LOCAL_DIR)/lock
SPOOL = \$(LOCAL_DIR)/spool
EXECUTE = \$(LOCAL_DIR)/execute
CRED_STORE_DIR = \$(LOCAL_DIR)/cred_dir
PROCD_ADDRESS = \$(RUN)/procd_pipe
EOF
    pool_settings
  } >"$ROOT$CONFIG"
}

master_pid() {
  local pid
  pid=$(cat "$RUN/master.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

in_chroot() { chroot "$ROOT" env CONDOR_CONFIG="$CONFIG" "$@"; }

pool_answers() {
  in_chroot condor_status -schedd -af Name >/dev/null 2>&1 &&
    [ -n "$(in_chroot condor_status -negotiator -af Name 2>/dev/null)" ]
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
    say "condor_master runs but the pool does not answer; see the logs under $ROOT"
    exit 1
  fi
  if listening; then
    say "127.0.0.1:$PORT is taken by something this script did not start"
    exit 1
  fi
  ensure_user
  mount_proc "$ROOT"
  local dirs=(/run/condor /var/lock/condor /var/log/condor /var/lib/condor/spool
    /var/lib/condor/execute)
  [ -n "$POOL" ] && dirs=("$POOL_DIR"/{run,log,lock,spool,execute,cred_dir} "$WORKERS")
  for dir in "${dirs[@]}"; do
    # Inside the chroot: its /var/lock is a symlink to /run/lock, which must resolve there.
    chroot "$ROOT" mkdir -p "$dir"
    chroot "$ROOT" chown condor:condor "$dir"
  done
  # A simple command (not a function), so that $! is condor_master's pid (chroot and env exec).
  chroot "$ROOT" env CONDOR_CONFIG="$CONFIG" condor_master -f >"$RUN/master.out" 2>&1 9>&- &
  echo $! >"$RUN/master.pid"
  wait_answers && { say "pool up on 127.0.0.1:$PORT"; return 0; }
  say "the pool did not answer in 15 s; see the logs under $ROOT"
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

destroy() {
  # A private pool only: its workers (startds Berth started in it), its daemons, its files.
  [ -n "$POOL" ] || { say "destroy: only a private pool (BERTH_HTCONDOR_POOL)"; exit 2; }
  local file pid
  for file in "$ROOT$WORKERS"/*/startd.pid; do
    [ -e "$file" ] || continue
    pid=$(cat "$file" 2>/dev/null) || continue
    # Each startd leads its own session: its procd and starters go with it.
    [ -n "$pid" ] && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; } || true
  done
  down
  rm -rf "${ROOT:?}$POOL_DIR" "$RUN"
}

print_env() {
  # What a client needs, as shell assignments (the fixture reads them).
  echo "BERTH_HTCONDOR_ROOT=$ROOT"
  echo "BERTH_HTCONDOR_COLLECTOR=127.0.0.1:$PORT"
  echo "BERTH_HTCONDOR_USER=$SUBMIT_USER"
  echo "BERTH_HTCONDOR_UID=$(id -u "$SUBMIT_USER")"
  echo "BERTH_HTCONDOR_GROUPS=$GROUPS_SPEC"
  echo "BERTH_HTCONDOR_CONFIG=$CONFIG"
  echo "BERTH_HTCONDOR_WORKERS=$WORKERS"
}

# One `up` or `down` at a time (parallel test workers all call `up`).
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock"
flock 9

case "${1:-up}" in
  install) install_chroot ;;
  up) up ;;
  down) down ;;
  destroy) destroy ;;
  status) master_pid >/dev/null && pool_answers && echo up || { echo down; exit 1; } ;;
  env) print_env ;;
  *) say "usage: $0 [install|up|down|destroy|status|env]"; exit 2 ;;
esac
