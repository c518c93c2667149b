#!/usr/bin/env bash
# A single-node SLURM cluster on this machine: for the tests marked `slurm`, and for trying
# `python train.py -m hydra/launcher=slurm ...` before a real cluster. As root:
#
#   apt-get install -y slurm-wlm munge     # Debian's packages (slurm 22.05)
#   bash scripts/local_slurm.sh start      # writes /etc/slurm/slurm.conf, starts munged, slurmctld, slurmd
#   bash scripts/local_slurm.sh status     # sinfo, squeue
#   bash scripts/local_slurm.sh stop
#
# One node with this host's cores and 90% of its memory, one partition without a time limit; no
# cgroups and no accounting (so `sacct` answers "accounting storage is disabled"; submitit then
# tells a finished job by its result file). Requeued jobs start again after 10 s instead of SLURM's
# default 120 s (AuthInfo cred_expire), so a test that needs several allocations stays short.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
SPOOL=/var/spool/slurm-isotune
LOGS=/var/log/slurm-isotune

write_config() {
  local host cpus memory_mib
  host=$(hostname -s)
  cpus=$(nproc)
  memory_mib=$(($(awk '/^MemTotal/ {print $2}' /proc/meminfo) * 9 / 10 / 1024))
  mkdir -p /etc/slurm "$SPOOL/ctld" "$SPOOL/d" "$LOGS"
  cat >"$CONF" <<EOF
# Written by isotune's scripts/local_slurm.sh: a single-node cluster for tests.
ClusterName=isotune-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5
ReturnToService=2
KillWait=10
MinJobAge=600
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldPidFile=/run/slurmctld-isotune.pid
SlurmdPidFile=/run/slurmd-isotune.pid
NodeName=$host CPUs=$cpus RealMemory=$memory_mib State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null; then mungekey -c -f; else create-munge-key -f; fi
  fi
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
  chmod 0400 /etc/munge/munge.key
  pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
}

wait_idle() {
  for _ in $(seq 60); do
    if sinfo --noheader --format=%T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      return 0
    fi
    sleep 1
  done
  echo "local SLURM did not come up; see $LOGS/" >&2
  return 1
}

case "${1:-}" in
start)
  command -v slurmctld >/dev/null || {
    echo "slurmctld is not installed: apt-get install -y slurm-wlm munge" >&2
    exit 1
  }
  write_config
  start_munge
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  wait_idle
  scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true
  sinfo
  ;;
stop)
  pkill -x slurmd || true
  pkill -x slurmctld || true
  pkill -x munged || true
  ;;
status)
  sinfo && squeue
  ;;
*)
  echo "usage: bash $0 start|stop|status" >&2
  exit 2
  ;;
esac
