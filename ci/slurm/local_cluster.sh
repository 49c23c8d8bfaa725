#!/usr/bin/env bash
# A single-node Slurm on localhost, for CI and for trying the job scripts: no systemd, every
# file (slurm.conf, state, spool, logs, PID files) under DIR.
#
#   ci/slurm/local_cluster.sh start DIR    # then: export SLURM_CONF=DIR/slurm.conf
#   ci/slurm/local_cluster.sh status DIR
#   ci/slurm/local_cluster.sh stop DIR
#
# Needs root and Debian's slurm-wlm and munge (apt-get install --no-install-recommends slurm-wlm
# munge). The node claims 8 one-CPU cores whatever the machine has (SlurmdParameters=
# config_overrides), so an 8-rank job fits on a 2-core VM. Ports 6817 (slurmctld) and 6818 (slurmd)
# must be free. start exits 0 once the node is idle; on any failure it prints why, stops what it
# started and exits non-zero. stop always exits 0.
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|status DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
DIR=$2
case $cmd in start | stop | status) ;; *) usage ;; esac

CONF=$DIR/slurm.conf
CTLD_PORT=6817
SLURMD_PORT=6818
# Whether this script started munged (it reuses one that already answers on the default socket).
MUNGE_PID=$DIR/munge/munged.pid
LOG_TAG=local_cluster
# shellcheck source=ci/slurm/cluster_lib.sh
. "$(dirname "$0")/cluster_lib.sh"

munge_works() {
  timeout 10 munge -n 2>/dev/null | timeout 10 unmunge >/dev/null 2>&1
}

# Prints the end of each daemon log (start failures are explained there).
show_logs() {
  local f
  for f in "$DIR/munge/munged.log" "$DIR/slurmctld.log" "$DIR/slurmd.log"; do
    [ -s "$f" ] && { echo "--- $f (last 20 lines)"; tail -n 20 "$f"; }
  done >&2
  return 0
}

write_conf() {
  local host=$1
  cat >"$CONF" <<EOF
# Written by ci/slurm/local_cluster.sh: one node on localhost, root daemons, no accounting.
ClusterName=mpiformer-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
# No cgroups, no accounting daemon: plain process tracking, nothing to set up.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Debian's MPICH speaks PMI2 (not PMIx): plain srun then gives one MPI world.
MpiDefault=pmi2
# A job that can never fit is rejected at submission instead of pending forever (a CI hang).
EnforcePartLimits=ALL
# The node comes back idle after a restart without an scontrol update.
ReturnToService=2
# A requeued job may start again once its credential expires: after 10 s here instead of the
# default ~2 minutes, so CI can watch a job requeue itself and resume.
AuthInfo=cred_expire=10
MailProg=/bin/true
# Trust the node line below rather than the hardware: 8 one-CPU cores on any machine.
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=30:00 State=UP
EOF
}

node_idle() {
  local state
  state=$(timeout 5 sinfo -h -N -n "$1" -o %T 2>/dev/null) || return 1
  [ "$state" = idle ]
}

# A start that failed half-way: say why, and stop what did start.
abort() {
  show_logs
  stop_daemons
  die "$1"
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root (slurmd runs jobs as their users, munged as munge)"
  local c
  for c in munged munge unmunge slurmctld slurmd scontrol sinfo runuser timeout; do
    command -v "$c" >/dev/null ||
      die "'$c' not found: apt-get install --no-install-recommends slurm-wlm munge"
  done
  id munge >/dev/null 2>&1 || die "no 'munge' user (the munge package creates it)"
  local host
  host=$(hostname -s)
  # slurmd finds its NodeName from the hostname; the daemons talk over loopback.
  [[ $(getent hosts "$host") =~ ^(127\.|::1) ]] ||
    die "short hostname '$host' does not resolve to a loopback address (add it to /etc/hosts)"
  local p
  for p in $CTLD_PORT $SLURMD_PORT; do
    ! port_busy "$p" || die "port $p is in use (another slurmctld/slurmd?); stop it first"
  done
  [ -z "$(pid_of "$DIR/slurmctld.pid" slurmctld)$(pid_of "$DIR/slurmd.pid" slurmd)" ] ||
    die "a cluster already runs from $DIR"

  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
  # munged (user munge) writes under DIR/munge: DIR must be traversable, its own dir private.
  chmod 0711 "$DIR"
  chown munge:munge "$DIR/munge"
  chmod 0700 "$DIR/munge"
  runuser -u munge -- test -w "$DIR/munge" ||
    die "user munge cannot write to $DIR/munge: make the directories above it traversable (o+x)"
  write_conf "$host"
  export SLURM_CONF=$CONF

  if munge_works; then
    echo "local_cluster: reusing the munged already running"
  else
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create >/dev/null ||
      die "no /etc/munge/munge.key and mungekey failed"
    # munged's socket lives in /run/munge, which must belong to munge.
    mkdir -p /run/munge
    chown munge:munge /run/munge
    chmod 0755 /run/munge
    timeout 30 runuser -u munge -- munged --pid-file="$MUNGE_PID" \
      --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed" ||
      abort "munged failed to start"
    wait_for 10 munge_works || abort "munged does not answer"
  fi

  # Both daemonise once they have read the configuration; the pings say when they serve.
  timeout 30 slurmctld -f "$CONF" || abort "slurmctld failed to start"
  wait_for 30 ctld_up || abort "slurmctld does not answer on port $CTLD_PORT"
  timeout 30 slurmd -f "$CONF" || abort "slurmd failed to start"
  wait_for 30 node_idle "$host" || abort "node $host did not become idle"
  echo "local_cluster: up in $DIR (export SLURM_CONF=$CONF)"
  timeout 10 sinfo -N -l || true
}

# Every daemon this directory started: SIGTERM all at once, then wait (SIGKILL after 20 s).
stop_daemons() {
  local pids=() p
  for p in "$(pid_of "$DIR/slurmd.pid" slurmd)" "$(pid_of "$DIR/slurmctld.pid" slurmctld)" \
    "$(pid_of "$MUNGE_PID" munged)"; do
    if [ -n "$p" ]; then pids+=("$p"); fi
  done
  stop_pids "${pids[@]}"
}

stop() {
  [ -d "$DIR" ] || exit 0
  export SLURM_CONF=$CONF
  # Jobs still running (a test that timed out) would outlive slurmd in their slurmstepd: cancel
  # them while slurmctld can still do it, and give them a few seconds to go.
  cancel_jobs "$DIR/slurmctld.pid"
  stop_daemons
  echo "local_cluster: stopped ($DIR)"
  exit 0
}

status() {
  local up=0 name pid pid_file
  for name in munged slurmctld slurmd; do
    pid_file=$DIR/$name.pid
    [ "$name" != munged ] || pid_file=$MUNGE_PID
    pid=$(pid_of "$pid_file" "$name")
    if [ -n "$pid" ]; then
      echo "$name: running (PID $pid)"
    elif [ "$name" = munged ] && munge_works; then
      echo "munged: not started here, but one answers (started elsewhere)"
    else
      echo "$name: not running"
      up=1
    fi
  done
  if [ $up -eq 0 ]; then
    SLURM_CONF=$CONF timeout 10 sinfo -N -l || up=1
  fi
  exit $up
}

case $cmd in
  start) start ;;
  stop) stop ;;
  status) status ;;
esac
