#!/usr/bin/env bash
# A multi-node Slurm on one machine, for tests: NODES (2-4) nodes, each a Linux network namespace
# with its own hostname (UTS namespace), its own address on a private bridge and its own slurmd.
# slurmctld and a private munged run on the host side of the bridge. The file system is shared
# by all (namespaces share it), standing in for a parallel file system.
#
#   ci/slurm/multinode_cluster.sh start DIR [NODES]   # then: export SLURM_CONF=DIR/slurm.conf
#   ci/slurm/multinode_cluster.sh status DIR
#   ci/slurm/multinode_cluster.sh stop DIR
#
# Network: bridge mpfbr0 = 10.213.0.1/24 on the host; node i is namespace mpf-node<i>, hostname
# node<i>, address 10.213.0.<10+i> on its veth "mpf0" (the same name in every node, so one
# UCX_NET_DEVICES=mpf0 fits all). The namespaces have no default route: nothing outside the
# subnet can be reached from a node, and nothing outside the bridge and loopback is touched.
# Ports 6827 (slurmctld; it listens on every host address: NoCtldInAddrAny would bind the address
# the host name resolves to, loopback, which the nodes cannot reach) and 6828 (each slurmd, inside its own
# namespace), so this can run beside ci/slurm/local_cluster.sh (6817/6818). munged is private to
# DIR (its own socket, AuthInfo=socket=...): it never shares or stops the system's munged.
#
# start exits 0 once every node is idle; 77 when this machine cannot make the namespaces or run
# the daemons at all (not root, no ip/unshare/nsenter, namespaces refused: a test skips); 1 on
# any other failure, after stopping what it started. stop removes daemons, job processes,
# namespaces, veths and the bridge, and always exits 0; it is safe to run twice.
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|status DIR [NODES (2-4, default 2)]" >&2
  exit 2
}
if [ $# -lt 2 ] || [ $# -gt 3 ]; then usage; fi
cmd=$1
DIR=$(realpath -m "$2") # absolute: the bridge records it, and stop compares
NODES=${3:-2}
case $cmd in start | stop | status) ;; *) usage ;; esac
[[ $NODES =~ ^[2-4]$ ]] || usage

CONF=$DIR/slurm.conf
CTLD_PORT=6827
SLURMD_PORT=6828
BRIDGE=mpfbr0
SUBNET=10.213.0
HOST_ADDR=$SUBNET.1
NS_PREFIX=mpf-node       # namespace names: mpf-node1 ...
VETH_HOST_PREFIX=mpfh    # host ends of the veth pairs: mpfh1 ...
NODE_IF=mpf0             # the node end, renamed inside its namespace
MUNGE_DIR=$DIR/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MUNGE_PID=$MUNGE_DIR/munged.pid
# How many nodes the running cluster has (stop/status read it; start writes it).
NODES_FILE=$DIR/nodes

LOG_TAG=multinode_cluster
# shellcheck source=ci/slurm/cluster_lib.sh
. "$(dirname "$0")/cluster_lib.sh"

skip() {
  echo "$LOG_TAG: cannot run here: $*" >&2
  exit 77
}

node_addr() { echo "$SUBNET.$((10 + $1))"; }
ns_of() { echo "$NS_PREFIX$1"; }
# in_node I CMD...: runs CMD in node I's network namespace (nsenter, unlike `ip netns exec`, makes
# no mount namespace: the node sees the host's file system exactly).
in_node() {
  local i=$1
  shift
  nsenter --net="/run/netns/$(ns_of "$i")" "$@"
}

munge_works() {
  timeout 10 munge -S "$MUNGE_SOCKET" -n 2>/dev/null |
    timeout 10 unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1
}

show_logs() {
  local f
  for f in "$MUNGE_DIR/munged.log" "$DIR/slurmctld.log" "$DIR"/slurmd-node*.log; do
    [ -s "$f" ] && { echo "--- $f (last 20 lines)"; tail -n 20 "$f"; }
  done >&2
  return 0
}

write_conf() {
  local host=$1 i nodes=""
  cat >"$CONF" <<EOF
# Written by ci/slurm/multinode_cluster.sh: $NODES nodes in network namespaces on one machine.
ClusterName=mpiformer-multi
SlurmctldHost=$host($HOST_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# The private munged of this cluster; credentials expire after 10 s (see local_cluster.sh).
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
StateSaveLocation=$DIR/state
# %n: every slurmd has its own spool, PID file and log although they share the file system.
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
EnforcePartLimits=ALL
ReturnToService=2
MailProg=/bin/true
# srun (inside a node) listens for its step's I/O on these ports of its node's address.
SrunPortRange=60001-60999
SlurmdParameters=config_overrides
# A node that stops answering is DOWN after 10 s (Slurm's default: 300 s), and its jobs end or
# requeue then: the node-loss test waits for this.
SlurmdTimeout=10
# A pending job is looked at every 5 s (default 60 s): a requeued job starts soon after its
# BeginTime (cred_expire + 1 s after the requeue).
SchedulerParameters=sched_interval=5
EOF
  for i in $(seq 1 "$NODES"); do
    echo "NodeName=node$i NodeAddr=$(node_addr "$i") CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000 State=UNKNOWN" >>"$CONF"
    nodes+=${nodes:+,}node$i
  done
  echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=30:00 State=UP" >>"$CONF"
}

# The network: bridge, then per node a namespace and a veth pair. Each object is made only if
# absent, and all carry this script's prefixes, so stop knows exactly what to remove.
make_network() {
  ip link add "$BRIDGE" type bridge || return 1
  ip addr add "$HOST_ADDR/24" dev "$BRIDGE" || return 1
  # The alias names the cluster directory: a cluster left behind can be found and stopped.
  ip link set "$BRIDGE" alias "multinode_cluster $DIR" || return 1
  ip link set "$BRIDGE" up || return 1
  local i ns
  for i in $(seq 1 "$NODES"); do
    ns=$(ns_of "$i")
    ip netns add "$ns" || return 1
    ip link add "$VETH_HOST_PREFIX$i" type veth peer name "$NODE_IF" netns "$ns" || return 1
    ip link set "$VETH_HOST_PREFIX$i" master "$BRIDGE" up || return 1
    in_node "$i" ip link set lo up || return 1
    in_node "$i" ip addr add "$(node_addr "$i")/24" dev "$NODE_IF" || return 1
    in_node "$i" ip link set "$NODE_IF" up || return 1
  done
}

# Every node's link is up (a veth comes up once both ends are; whether the nodes reach
# slurmctld shows when they register).
net_up() {
  local i
  for i in $(seq 1 "$NODES"); do
    [[ $(in_node "$i" ip -o link show "$NODE_IF" 2>/dev/null) == *"state UP"* ]] || return 1
  done
}

all_idle() {
  local states
  states=$(timeout 5 sinfo -h -N -o %T 2>/dev/null) || return 1
  [ "$(grep -cx idle <<<"$states")" -eq "$NODES" ]
}

abort() {
  show_logs
  teardown
  die "$1"
}

start() {
  [ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, bridge, slurmd)"
  local c
  for c in ip nsenter unshare munged munge unmunge slurmctld slurmd scontrol sinfo runuser timeout; do
    command -v "$c" >/dev/null || skip "'$c' not found (iproute2, util-linux, slurm-wlm, munge)"
  done
  id munge >/dev/null 2>&1 || skip "no 'munge' user (the munge package creates it)"
  [ -s /etc/munge/munge.key ] || skip "no /etc/munge/munge.key"
  # Can this process make namespaces at all (a container without CAP_SYS_ADMIN cannot)?
  timeout 10 unshare --net --uts true 2>/dev/null || skip "network/UTS namespaces refused (no CAP_SYS_ADMIN?)"
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "bridge $BRIDGE exists: another cluster runs; stop it first:" \
      "$0 stop $(ip -o link show "$BRIDGE" | sed -nE 's/.* alias multinode_cluster (.*)$/\1/p')"
  fi
  ! ip -4 route show to match "$HOST_ADDR" 2>/dev/null | grep -qv '^default' ||
    die "$SUBNET.0/24 is already routed on this machine: it would clash"
  [ -z "$(pid_of "$DIR/slurmctld.pid" slurmctld)" ] || die "a cluster already runs from $DIR"
  ! port_busy "$CTLD_PORT" || die "port $CTLD_PORT is in use"

  mkdir -p "$DIR/state" "$MUNGE_DIR"
  chmod 0711 "$DIR"
  chown munge:munge "$MUNGE_DIR"
  chmod 0711 "$MUNGE_DIR" # munged wants its socket directory traversable by all
  runuser -u munge -- test -w "$MUNGE_DIR" ||
    die "user munge cannot write to $MUNGE_DIR: make the directories above it traversable (o+x)"
  echo "$NODES" >"$NODES_FILE"
  # From here on any failure tears everything down again.
  trap 'abort "interrupted"' INT TERM
  if ! make_network 2>"$DIR/net.err"; then
    cat "$DIR/net.err" >&2
    teardown
    # The first ip command failing means the kernel refuses (e.g. no bridge module): skip.
    skip "could not make the bridge/namespaces/veths (see above)"
  fi
  wait_for 10 net_up || abort "the nodes' links to $BRIDGE do not come up"

  local host
  host=$(hostname -s)
  write_conf "$host"
  export SLURM_CONF=$CONF

  timeout 30 runuser -u munge -- munged --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_PID" \
    --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" ||
    abort "munged failed to start"
  wait_for 10 munge_works || abort "munged does not answer on $MUNGE_SOCKET"

  timeout 30 slurmctld -f "$CONF" || abort "slurmctld failed to start"
  wait_for 30 ctld_up || abort "slurmctld does not answer on $HOST_ADDR:$CTLD_PORT"
  # The nodes resolve each other's names (MPICH's hydra, LAUNCHER=mpiexec, connects to its
  # proxies by hostname): the host's /etc/hosts plus the nodes, bound over /etc/hosts inside
  # the nodes' mount namespaces only; the host's file is never changed.
  local i
  {
    cat /etc/hosts
    echo "# the nodes of ci/slurm/multinode_cluster.sh"
    for i in $(seq 1 "$NODES"); do echo "$(node_addr "$i") node$i"; done
  } >"$DIR/hosts"
  for i in $(seq 1 "$NODES"); do
    # Its own hostname (a UTS namespace that lives as long as slurmd and the jobs it starts): the
    # ranks see node<i> from gethostname(), as on a real cluster. Its own /sys too (a mount
    # namespace, like `ip netns exec` makes): UCX lists network devices from /sys/class/net, and
    # the host's sysfs shows the host's devices, not mpf0; its own /etc/hosts (above); and its
    # own boot id: UCX takes two processes with one boot id for one host and joins them through
    # shared memory, which every namespace here shares, so without it "inter-node" messages would
    # never touch the network.
    # slurmd needs the cgroup file systems under /sys/fs/cgroup: the new sysfs gets the host's
    # ones bound into it before it covers /sys. Propagation "slave": the host's later mounts still show inside, the node's mounts
    # stay its own (the host never sees DIR/sys-node<i> mounted). slurmd daemonises.
    mkdir -p "$DIR/sys-node$i"
    cat /proc/sys/kernel/random/uuid >"$DIR/boot_id-node$i" # a fresh one at each read
    timeout 30 nsenter --net="/run/netns/$(ns_of "$i")" \
      unshare --uts --mount --propagation slave sh -c "
        mount -t sysfs sysfs '$DIR/sys-node$i' &&
        mount --rbind /sys/fs/cgroup '$DIR/sys-node$i/fs/cgroup' &&
        mount --rbind '$DIR/sys-node$i' /sys &&
        mount --bind '$DIR/hosts' /etc/hosts &&
        mount --bind '$DIR/boot_id-node$i' /proc/sys/kernel/random/boot_id &&
        hostname node$i && exec slurmd -f '$CONF' -N node$i" ||
      abort "slurmd of node$i failed to start"
  done
  wait_for 60 all_idle || abort "not all $NODES nodes became idle"
  trap - INT TERM
  echo "$LOG_TAG: $NODES nodes up in $DIR (export SLURM_CONF=$CONF)"
  timeout 10 sinfo -N -l || true
}

# The processes in node I's namespace (slurmd, slurmstepd, job scripts, ranks).
node_pids() { ip netns pids "$(ns_of "$1")" 2>/dev/null || true; }

# Everything start made, in reverse: processes in the namespaces, daemons, namespaces, bridge.
teardown() {
  local n i pids=() p alias
  # The network is another cluster's when the bridge names another directory: leave it (a stop
  # after a start that found the bridge taken must not tear down the cluster that has it).
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    alias=$(ip -o link show "$BRIDGE" | sed -nE 's/.* alias (.*)$/\1/p')
    if [ "$alias" != "multinode_cluster $DIR" ]; then
      echo "$LOG_TAG: $BRIDGE belongs to '${alias:-?}', not to $DIR: left alone" >&2
      stop_pids "$(pid_of "$DIR/slurmctld.pid" slurmctld)" "$(pid_of "$MUNGE_PID" munged)"
      return 0
    fi
  fi
  n=$(cat "$NODES_FILE" 2>/dev/null || echo 4)
  [[ $n =~ ^[2-4]$ ]] || n=4
  for i in $(seq 1 "$n"); do
    # shellcheck disable=SC2207  # a list of PIDs
    pids+=($(node_pids "$i"))
  done
  for p in "$(pid_of "$DIR/slurmctld.pid" slurmctld)" "$(pid_of "$MUNGE_PID" munged)"; do
    if [ -n "$p" ]; then pids+=("$p"); fi
  done
  stop_pids "${pids[@]}"
  for i in $(seq 1 "$n"); do
    # A namespace cannot go while something still runs in it: the last stragglers get KILL.
    # shellcheck disable=SC2046
    stop_pids $(node_pids "$i")
    ip link del "$VETH_HOST_PREFIX$i" 2>/dev/null || true
    ip netns del "$(ns_of "$i")" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  return 0
}

stop() {
  export SLURM_CONF=$CONF
  # Cancel the jobs while slurmctld can still do it (their steps then end in order). Without
  # DIR (removed under a running cluster) the teardown still finds the namespaces by name.
  if [ -d "$DIR" ]; then cancel_jobs "$DIR/slurmctld.pid"; fi
  teardown
  echo "$LOG_TAG: stopped ($DIR)"
  exit 0
}

status() {
  local up=0 i n p
  n=$(cat "$NODES_FILE" 2>/dev/null || echo 0)
  p=$(pid_of "$MUNGE_PID" munged)
  if [ -n "$p" ]; then echo "munged: running (PID $p)"; else echo "munged: not running"; up=1; fi
  p=$(pid_of "$DIR/slurmctld.pid" slurmctld)
  if [ -n "$p" ]; then echo "slurmctld: running (PID $p)"; else echo "slurmctld: not running"; up=1; fi
  for i in $(seq 1 "$n"); do
    p=$(pid_of "$DIR/slurmd-node$i.pid" slurmd)
    if [ -n "$p" ]; then echo "slurmd node$i: running (PID $p)"; else echo "slurmd node$i: not running"; up=1; fi
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then echo "bridge $BRIDGE: present"; else echo "bridge $BRIDGE: absent"; fi
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
