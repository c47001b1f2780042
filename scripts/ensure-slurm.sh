#!/usr/bin/env bash
# A private Slurm cluster for Berth's elastic tests and demos: `up`, `down`, `status`, `env`.
#
# Debian's `slurm-wlm` and `munge` (installed with apt-get when missing). Everything else lives
# in the state dir $BERTH_BATCH_HOME/slurm (default ~/.cache/berth-batch/slurm): a private
# munge key and socket, slurm.conf, state, spool, logs and pid files; the system's munge and
# /etc/slurm are not touched. The controller starts with no compute node: the workers are the
# dynamic slurmds Berth starts for its "VMs" (berth.elastic.workers.slurm), up to MaxNodeCount.
# Many workers on one machine (tests, demos) cannot all be dynamic nodes: Slurm 22.05 reaches a
# dynamic node on the cluster-wide SlurmdPort only. So the script also declares worker slots
# (BERTH_SLURM_SLOTS "cpus:count,...", default "1:4,2:8"): FUTURE nodes berth-c<cpus>-<k>, each
# with its own port from BERTH_SLURM_SLOT_PORT (17001), which a worker takes for one VM.
# One partition per group (BERTH_SLURM_GROUPS, comma-separated, default "besiii,juno"; jobs
# carry the group as their account too) plus a default partition `batch`.
#
# Sandbox settings (no cgroups, no systemd): proctrack/linuxproc, task/none, no accounting
# gather, SlurmUser=root. Idempotent: `up` reuses a controller that answers, `down` stops only
# the daemons whose pid files it wrote.
set -euo pipefail

HOME_DIR=${BERTH_BATCH_HOME:-$HOME/.cache/berth-batch}/slurm
CTLD_PORT=${BERTH_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${BERTH_SLURMD_PORT:-6818}
GROUPS_SPEC=${BERTH_SLURM_GROUPS:-besiii,juno}
MAX_NODES=${BERTH_SLURM_MAX_NODES:-64}
SLOTS_SPEC=${BERTH_SLURM_SLOTS:-1:4,2:8}
FIRST_SLOT_PORT=${BERTH_SLURM_SLOT_PORT:-17001}
CONF=$HOME_DIR/etc/slurm.conf
SOCKET=$HOME_DIR/munge/munge.socket

say() { echo "ensure-slurm: $*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    say "$1 needs root"
    exit 1
  fi
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
    command -v munged >/dev/null && command -v squeue >/dev/null; then
    return 0
  fi
  need_root "installing slurm-wlm and munge"
  say "installing slurm-wlm and munge from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
}

pid_alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

wait_for() {
  # wait_for <tries of 0.1 s> <command...>
  local tries=$1
  shift
  for _ in $(seq 1 "$tries"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

start_munge() {
  mkdir -p "$HOME_DIR/munge"
  chmod 700 "$HOME_DIR/munge"
  if [ ! -s "$HOME_DIR/munge/munge.key" ]; then
    dd if=/dev/urandom of="$HOME_DIR/munge/munge.key" bs=1 count=1024 status=none
    chmod 400 "$HOME_DIR/munge/munge.key"
  fi
  pid_alive "$HOME_DIR/munge/munged.pid" >/dev/null && return 0
  rm -f "$SOCKET" "$SOCKET.lock"
  munged --force --socket="$SOCKET" --key-file="$HOME_DIR/munge/munge.key" \
    --pid-file="$HOME_DIR/munge/munged.pid" --log-file="$HOME_DIR/munge/munged.log" \
    --seed-file="$HOME_DIR/munge/munged.seed" 9>&-
  wait_for 50 test -S "$SOCKET" || { say "munged did not start"; exit 1; }
}

write_config() {
  local host partitions="" group
  host=$(hostname -s)
  mkdir -p "$HOME_DIR"/{etc,state,spool,log,run}
  local nodes="" port=$FIRST_SLOT_PORT entry cpus count k
  IFS=',' read -ra slots <<<"$SLOTS_SPEC"
  for entry in "${slots[@]}"; do
    cpus=${entry%%:*}
    count=${entry#*:}
    for k in $(seq -w 1 "$count"); do
      nodes="${nodes}NodeName=berth-c$cpus-$k NodeAddr=127.0.0.1 NodeHostname=$host Port=$port"
      nodes="$nodes CPUs=$cpus State=FUTURE"$'\n'
      port=$((port + 1))
    done
  done
  IFS=',' read -ra groups <<<"$GROUPS_SPEC"
  for group in "${groups[@]}"; do
    partitions="${partitions}PartitionName=$group MaxTime=INFINITE State=UP"$'\n'
  done
  cat >"$CONF.new" <<EOF
# Written by scripts/ensure-slurm.sh: a controller without static nodes; workers join as
# dynamic nodes (slurmd -Z) and are added to their group's partition.
ClusterName=berth
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$HOME_DIR/state
SlurmdSpoolDir=$HOME_DIR/spool/%n
SlurmctldPidFile=$HOME_DIR/run/slurmctld.pid
SlurmdPidFile=$HOME_DIR/run/slurmd-%n.pid
SlurmctldLogFile=$HOME_DIR/log/slurmctld.log
SlurmdLogFile=$HOME_DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
MaxNodeCount=$MAX_NODES
SlurmctldTimeout=30
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=2
MinJobAge=60
DebugFlags=NO_CONF_HASH
$nodes
PartitionName=batch Default=YES MaxTime=INFINITE State=UP
$partitions
EOF
  mv "$CONF.new" "$CONF"
}

ctld_answers() { SLURM_CONF=$CONF scontrol ping 2>/dev/null | grep -q 'is UP'; }

up() {
  install_packages
  need_root "starting Slurm"
  start_munge
  if pid_alive "$HOME_DIR/run/slurmctld.pid" >/dev/null && ctld_answers; then
    say "slurmctld already up on 127.0.0.1:$CTLD_PORT"
    return 0
  fi
  write_config
  # -c: a clean start (no jobs or dynamic nodes kept from a previous run), -i: ignore stale state.
  SLURM_CONF=$CONF slurmctld -c -i 9>&-
  wait_for 100 ctld_answers || { say "slurmctld did not answer; see $HOME_DIR/log"; exit 1; }
  say "slurmctld up on 127.0.0.1:$CTLD_PORT"
}

stop_pidfile() {
  local pid
  pid=$(pid_alive "$1") || { rm -f "$1"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  rm -f "$1"
}

down() {
  local file
  for file in "$HOME_DIR"/run/slurmd-*.pid; do
    [ -e "$file" ] && stop_pidfile "$file"
  done
  stop_pidfile "$HOME_DIR/run/slurmctld.pid"
  stop_pidfile "$HOME_DIR/munge/munged.pid"
  say "stopped"
}

print_env() {
  echo "SLURM_CONF=$CONF"
  echo "BERTH_SLURM_HOME=$HOME_DIR"
  echo "BERTH_SLURM_GROUPS=$GROUPS_SPEC"
  echo "BERTH_SLURM_SLOTS=$SLOTS_SPEC"
}

# One `up` or `down` at a time (parallel test workers all call `up`).
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock"
flock 9

case "${1:-up}" in
  install) install_packages ;;
  up) up ;;
  down) down ;;
  status) ctld_answers && echo up || { echo down; exit 1; } ;;
  env) print_env ;;
  *) say "usage: $0 [install|up|down|status|env]"; exit 2 ;;
esac
