#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for running and testing
# `pmsim sweep --slurm` without a lab cluster (Debian 12, Slurm 22.05, as root).
#
#   bash scripts/slurm-local.sh start    install (if missing), configure, start, wait until the node is idle
#   bash scripts/slurm-local.sh stop     stop exactly the daemons `start` started (by their pid files)
#   bash scripts/slurm-local.sh status   sinfo and squeue of the local cluster
#   bash scripts/slurm-local.sh env      print the `export SLURM_CONF=…` line clients need
#
# Everything lives under $PMSIM_SLURM_DIR (default /tmp/pmsim-slurm): slurm.conf,
# state, spool, logs, pid files, and a private munge socket, so a munged or a
# Slurm that already runs on the machine is left alone. Clients (sbatch,
# squeue, scontrol, and pmsim through them) find the cluster through
# SLURM_CONF=$PMSIM_SLURM_DIR/slurm.conf.
set -euo pipefail

DIR=${PMSIM_SLURM_DIR:-/tmp/pmsim-slurm}
CONF=$DIR/slurm.conf
MUNGE_DIR=$DIR/munge
SOCKET=$MUNGE_DIR/munge.socket
# Ports of the private cluster (not Slurm's defaults, so a real one can coexist).
CTLD_PORT=${PMSIM_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${PMSIM_SLURM_SLURMD_PORT:-16818}

say() { echo "slurm-local: $*"; }
die() { echo "slurm-local: error: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (the daemons run as root here: SlurmUser=root)"
}

install() {
  local missing=()
  for p in slurmctld slurmd slurm-client munge; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Whether the daemon whose pid file is $1 is running (and is what the file says).
running() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

start_munge() {
  [ -f /etc/munge/munge.key ] || {
    say "creating a munge key"
    if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key; else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  }
  mkdir -p "$MUNGE_DIR"
  chown munge:munge "$MUNGE_DIR"
  # munged insists: the socket's folder executable by all, writable only by its owner.
  chmod 711 "$MUNGE_DIR"
  if running "$MUNGE_DIR/munged.pid"; then return; fi
  runuser -u munge -- munged -S "$SOCKET" --pid-file="$MUNGE_DIR/munged.pid" \
    --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" ||
    die "munged did not start (see $MUNGE_DIR/munged.log)"
  munge -S "$SOCKET" -n | unmunge -S "$SOCKET" >/dev/null || die "munge does not work (see $MUNGE_DIR/munged.log)"
}

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  # 90 % of the memory, in MiB: slurmd refuses a node that has less than configured.
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
  cat >"$CONF" <<EOF
# A one-node cluster written by scripts/slurm-local.sh; everything under $DIR.
ClusterName=pmsim
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
# No cgroups in containers and small VMs: track processes through /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
# Keep finished jobs visible to scontrol for an hour (there is no accounting database).
MinJobAge=3600
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=pmsim Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  need_root
  install
  start_munge
  write_conf
  export SLURM_CONF=$CONF
  running "$DIR/slurmctld.pid" || slurmctld -f "$CONF" || die "slurmctld did not start (see $DIR/log/slurmctld.log)"
  running "$DIR/slurmd.pid" || slurmd -f "$CONF" || die "slurmd did not start (see $DIR/log/slurmd.log)"
  local i state
  for i in $(seq 1 60); do
    state=$(sinfo -h -o '%T' 2>/dev/null | head -1 || true)
    if [ "$state" = idle ] || [ "$state" = mixed ] || [ "$state" = allocated ]; then
      say "cluster up: node $(hostname -s), $(nproc) CPUs, partition pmsim ($state)"
      say "clients need: export SLURM_CONF=$CONF"
      return
    fi
    sleep 0.5
  done
  die "the node did not become idle within 30 s (state '${state:-none}'; see $DIR/log/)"
}

stop_one() {
  local name=$1 pidfile=$2 pid i
  running "$pidfile" || return 0
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { say "stopped $name ($pid)"; rm -f "$pidfile"; return; }
    sleep 0.2
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  say "killed $name ($pid)"
}

stop() {
  need_root
  stop_one slurmd "$DIR/slurmd.pid"
  stop_one slurmctld "$DIR/slurmctld.pid"
  stop_one munged "$MUNGE_DIR/munged.pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    export SLURM_CONF=$CONF
    sinfo && squeue
    ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *)
    echo "usage: $0 start|stop|status|env   (state in \$PMSIM_SLURM_DIR, default /tmp/pmsim-slurm)" >&2
    exit 2
    ;;
esac
