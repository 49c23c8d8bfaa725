# shellcheck shell=bash
# Shell helpers shared by the test clusters (local_cluster.sh, multinode_cluster.sh); sourced,
# not run. The sourcing script sets LOG_TAG (the prefix of its messages) first.

die() {
  echo "${LOG_TAG:-cluster}: $*" >&2
  exit 1
}

# pid_of FILE NAME: the PID in FILE if that process is alive and is NAME (guards against a stale
# file whose PID was reused by something else); empty otherwise.
pid_of() {
  local pid
  [ -s "$1" ] || return 0
  pid=$(tr -dc '0-9' <"$1")
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
  return 0
}

port_busy() {
  if command -v ss >/dev/null; then
    [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]
  else
    # No iproute2: something accepting on loopback is enough to make the daemon's bind fail.
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
  fi
}

# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds or time runs out.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

no_jobs() { [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]; }
# Cancels every job while slurmctld (its pid file $1) can still do it, so that their steps end in
# order rather than outliving slurmd in their slurmstepd, and gives them a few seconds to go.
cancel_jobs() {
  [ -n "$(pid_of "$1" slurmctld)" ] || return 0
  local jobs
  jobs=$(timeout 5 squeue -h -o %i 2>/dev/null | tr '\n' ' ') || jobs=
  if [ -n "${jobs// /}" ]; then
    # shellcheck disable=SC2086  # a list of job ids
    timeout 5 scancel $jobs 2>/dev/null || true
    wait_for 10 no_jobs || true
  fi
}
ctld_up() { [[ $(timeout 5 scontrol ping 2>/dev/null) == *"is UP"* ]]; }

# stop_pids PID...: SIGTERM to all at once, then wait; SIGKILL to any still alive after 20 s.
stop_pids() {
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  local deadline=$((SECONDS + 20)) p
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "${LOG_TAG:-cluster}: PID $p ignored SIGTERM; killing it" >&2
        kill -KILL "$p" 2>/dev/null || true
        break
      fi
      sleep 0.1
    done
  done
  return 0
}
