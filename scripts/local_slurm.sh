#!/usr/bin/env bash
# A single-node SLURM cluster on this machine: for the tests marked `slurm`, and for trying
# `python train.py -m hydra/launcher=slurm ...` before a real cluster. As root:
#
#   apt-get install -y slurm-wlm munge     # Debian's packages (slurm 22.05)
#   bash scripts/local_slurm.sh start      # writes /etc/slurm/slurm.conf, starts munged, slurmctld, slurmd
#   bash scripts/local_slurm.sh status     # sinfo, squeue
#   bash scripts/local_slurm.sh stop       # stops the daemons `start` started, and only those
#
# One node with this host's cores and 90% of its memory, one partition without a time limit; no
# cgroups and no accounting (so `sacct` answers "accounting storage is disabled"; submitit then
# tells a finished job by its result file). Requeued jobs start again after 10 s instead of SLURM's
# default 120 s (AuthInfo cred_expire), so a test that needs several allocations stays short.
#
# Safe on a machine that has its own SLURM: `start` refuses to overwrite a slurm.conf whose first
# line is not this script's marker (or a symlink), and to start beside a slurmctld or slurmd it did
# not start; it resumes only the node of its own conf. Its munged is its own (own key, socket and
# pid file under the state folder), so a system munged is neither used nor touched. `stop` stops
# only the processes named in this script's pid files, and only while each pid still belongs to
# the program it names (a reused pid is left alone).
# ISOTUNE_SLURM_CONF (the slurm.conf) and ISOTUNE_SLURM_STATE (spool, logs, munge and pid files)
# move both elsewhere; the tests point them at a temporary folder.
set -euo pipefail

CONF=${ISOTUNE_SLURM_CONF:-/etc/slurm/slurm.conf}
STATE=${ISOTUNE_SLURM_STATE:-/var/spool/slurm-isotune}
PIDS=$STATE/pids   # slurmctld.pid, slurmd.pid (written by the daemons); munged's is in $MUNGE
MUNGE=$STATE/munge # this cluster's munged: key, socket, pid, seed and log, owned by munge
# The first line of every slurm.conf this script wrote (its earlier versions too): the only
# slurm.conf it overwrites.
MARKER="# Written by isotune's scripts/local_slurm.sh: a single-node cluster for tests."
export SLURM_CONF=$CONF # every SLURM command below talks to this cluster

pid_file() {
  case $1 in
  munged) echo "$MUNGE/munged.pid" ;;
  *) echo "$PIDS/$1.pid" ;;
  esac
}

# Whether process $1 is alive (not a zombie) and runs program $2, as /proc tells.
runs() {
  local stat
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# The pid of the $1 this script started, if it is still running: the pid its pid file names,
# and only while that process is still $1 (a pid reused by another program is not ours).
our_pid() {
  local file pid
  file=$(pid_file "$1")
  [ -r "$file" ] || return 1
  pid=$(tr -d '[:space:]' <"$file")
  [[ $pid =~ ^[0-9]+$ ]] && runs "$pid" "$1" || return 1
  echo "$pid"
}

refuse_foreign_conf() {
  [ -e "$CONF" ] || [ -L "$CONF" ] || return 0
  if [ -L "$CONF" ] || [ "$(head -n 1 "$CONF")" != "$MARKER" ]; then
    echo "Refusing to overwrite $CONF: scripts/local_slurm.sh did not write it (it is a" \
      "symlink, or its first line is not '$MARKER'), so this machine has a SLURM of its" \
      "own. Use that SLURM directly (hydra/launcher=slurm), or set ISOTUNE_SLURM_CONF to" \
      "another path for the local cluster; the file was left as it is." >&2
    exit 1
  fi
}

refuse_foreign_daemons() {
  local name others
  for name in slurmctld slurmd; do
    our_pid "$name" >/dev/null && continue
    if others=$(pgrep -x "$name"); then
      echo "Refusing to start: a $name that scripts/local_slurm.sh did not start is running" \
        "(pid ${others//$'\n'/ }), so this machine runs a SLURM of its own; use it directly" \
        "(hydra/launcher=slurm). It was left running." >&2
      exit 1
    fi
  done
}

write_config() {
  local host cpus memory_mib
  host=$(hostname -s)
  cpus=$(nproc)
  memory_mib=$(($(awk '/^MemTotal/ {print $2}' /proc/meminfo) * 9 / 10 / 1024))
  mkdir -p "$(dirname "$CONF")" "$STATE/ctld" "$STATE/d" "$STATE/log" "$PIDS"
  cat >"$CONF" <<EOF
$MARKER
# \`bash scripts/local_slurm.sh stop\` stops it; \`start\` may overwrite this file.
ClusterName=isotune-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10,socket=$MUNGE/munge.socket
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
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$(pid_file slurmd)
NodeName=$host CPUs=$cpus RealMemory=$memory_mib State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  our_pid munged >/dev/null && return 0
  mkdir -p "$MUNGE"
  chown munge:munge "$MUNGE"
  chmod 0755 "$MUNGE" # the socket needs a folder everyone may enter; the key itself is 0600
  [ -s "$MUNGE/munge.key" ] || runuser -u munge -- mungekey --create --keyfile="$MUNGE/munge.key"
  runuser -u munge -- /usr/sbin/munged --key-file="$MUNGE/munge.key" \
    --socket="$MUNGE/munge.socket" --pid-file="$MUNGE/munged.pid" \
    --seed-file="$MUNGE/munged.seed" --log-file="$MUNGE/munged.log"
}

start_daemon() {
  our_pid "$1" >/dev/null && return 0
  "$1"
  for _ in $(seq 30); do
    our_pid "$1" >/dev/null && return 0
    sleep 1
  done
  echo "$1 did not start; see $STATE/log/" >&2
  return 1
}

wait_idle() {
  for _ in $(seq 60); do
    if sinfo --noheader --format=%T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      return 0
    fi
    sleep 1
  done
  echo "local SLURM did not come up; see $STATE/log/" >&2
  return 1
}

# Stop the $1 this script started (SIGTERM, then SIGKILL after 30 s), and nothing else.
stop_daemon() {
  local pid
  if ! pid=$(our_pid "$1"); then
    echo "$1: none started by scripts/local_slurm.sh is running"
    rm -f "$(pid_file "$1")"
    return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 30); do
    runs "$pid" "$1" || break
    sleep 1
  done
  runs "$pid" "$1" && kill -KILL "$pid"
  rm -f "$(pid_file "$1")"
  echo "$1 (pid $pid) stopped"
}

case "${1:-}" in
start)
  refuse_foreign_conf
  refuse_foreign_daemons
  command -v slurmctld >/dev/null || {
    echo "slurmctld is not installed: apt-get install -y slurm-wlm munge" >&2
    exit 1
  }
  write_config
  start_munge
  start_daemon slurmctld
  start_daemon slurmd
  wait_idle
  # The node is this script's own (its conf, checked above), so resuming it undrains nothing
  # an administrator drained.
  scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true
  sinfo
  ;;
stop)
  stop_daemon slurmd
  stop_daemon slurmctld
  stop_daemon munged
  ;;
status)
  sinfo && squeue
  ;;
*)
  echo "usage: bash $0 start|stop|status" >&2
  exit 2
  ;;
esac
