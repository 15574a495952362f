#!/usr/bin/env bash
# A throw-away Slurm cluster on this host, for the Slurm runtime's tests (issue 30).
# Idempotent; run as root.
#
#   sudo scripts/setup-slurm.sh           # start what is not running; last line SLURM_CONF=...
#   export "$(sudo scripts/setup-slurm.sh | tail -n 1)"
#   sudo scripts/setup-slurm.sh --check   # the same, then a job on each node and a
#                                         # two-node step; exits non-zero on a failure
#   sudo scripts/setup-slurm.sh --stop    # cancel its jobs, stop its daemons, remove the
#                                         # namespaces (the state folder stays)
#
# What it does (each step only when needed, so a re-run is cheap):
#   1. installs Debian's slurm-wlm and munge (Slurm 22.05 on Debian 12);
#   2. makes a bridge (jgslurm0, 10.250.0.1/24: the host's end, slurmctld's address for
#      the nodes) and, for each of the two nodes, a network namespace with a veth on that
#      bridge (node1 10.250.0.11, node2 10.250.0.12). Each slurmd runs in that network
#      namespace and a UTS namespace with its node's name as hostname, like a real node:
#      Debian's Slurm has multiple-slurmd support (scontrol show config: MULTIPLE_SLURMD),
#      but its nodes share the host's name and address (a job's `hostname` prints the
#      host's on both, their jobs' ports collide). The host, slurmctld and both nodes
#      reach each other on the bridge (srun and job steps need all three ways); a port a
#      job opens in a node is reachable from the host at the node's address;
#   3. writes slurm.conf, gres.conf (two dummy GPUs per node, gres gpu:tesla:2: device
#      nodes 195,0 and 195,1 under STATE/dev) and the munge key under the state folder
#      (STATE: .test-services/slurm); nothing in /etc is touched: clients and daemons
#      find slurm.conf through SLURM_CONF (daemons: -f), munge through slurm.conf's
#      AuthInfo=socket=...; a changed configuration restarts the Slurm daemons;
#   4. starts a private munged, slurmctld and the two slurmd (no systemd: setsid, pid
#      files under STATE/run, logs under STATE/log), each only when its recorded pid is
#      not alive; slurmctld's StateSaveLocation persists, so restarting it keeps jobs;
#   5. waits for slurmctld to answer and both nodes to respond.
# Accounting: no slurmdbd, so `sacct` has nothing to read (it says "Slurm accounting
# storage is disabled"); finished jobs stay in `scontrol show job ID` for MinJobAge (300 s)
# and every finished job gets a line in STATE/log/jobcomp.txt (jobcomp/filetxt).
# The last line of output is SLURM_CONF=STATE/etc/slurm.conf. One such cluster per host
# (the bridge, namespace names and addresses are fixed). More: docs/developing.md.
#
# Environment: JOBGATE_SLURM_STATE (.test-services/slurm; relative: to the checkout),
# JOBGATE_SLURM_NET (10.250.0: the /24's first three octets).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STATE=${JOBGATE_SLURM_STATE:-$ROOT/.test-services/slurm}
[[ $STATE == /* ]] || STATE=$ROOT/$STATE
NET=${JOBGATE_SLURM_NET:-10.250.0}
PACKAGES=(slurm-wlm munge)
NODES=(node1 node2)
BRIDGE=jgslurm0
HOST_ADDR=$NET.1
CONF=$STATE/etc/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket

say() { echo "setup-slurm: $*" >&2; }
die() { say "error: $*"; exit 1; }

MODE=start
case ${1:-} in
    "") ;;
    --stop) MODE=stop ;;
    --check) MODE=check ;;
    *) die "usage: $0 [--stop | --check]" ;;
esac

[[ $(id -u) -eq 0 ]] || die "run as root (it installs packages and makes network namespaces)"
[[ $NET =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "bad JOBGATE_SLURM_NET: $NET (want three octets)"
export SLURM_CONF=$CONF

node_addr() { echo "$NET.$((10 + $1))"; }  # node index (1, 2) -> its address
netns_of() { echo "jgslurm-$1"; }

# -- 1. packages -----------------------------------------------------------------------
# shellcheck source=scripts/apt.sh
source "$ROOT/scripts/apt.sh"

# -- 2. network ----------------------------------------------------------------------------
ensure_network() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        say "created bridge $BRIDGE"
    fi
    ip addr replace "$HOST_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    local i node ns veth
    for i in "${!NODES[@]}"; do
        node=${NODES[$i]} ns=$(netns_of "${NODES[$i]}") veth=jgs-${NODES[$i]}
        if [[ -e /run/netns/$ns ]] && ip link show "$veth" >/dev/null 2>&1; then
            continue
        fi
        [[ -e /run/netns/$ns ]] && ip netns del "$ns"
        ip link del "$veth" 2>/dev/null || true
        ip netns add "$ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        ip link set "$veth" master "$BRIDGE" up
        ip -n "$ns" addr add "$(node_addr $((i + 1)))/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        ip -n "$ns" route add default via "$HOST_ADDR"
        say "created namespace $ns ($node, $(node_addr $((i + 1))))"
    done
}

remove_network() {
    local node ns pids
    for node in "${NODES[@]}"; do
        ns=$(netns_of "$node")
        [[ -e /run/netns/$ns ]] || continue
        pids=$(ip netns pids "$ns")  # what its slurmd left: job steps, their children
        if [[ -n $pids ]]; then
            say "stopping what still runs in $ns: ${pids//$'\n'/ }"
            # shellcheck disable=SC2086
            stop_pids $pids
        fi
        ip netns del "$ns"
        ip link del "jgs-$node" 2>/dev/null || true
        say "removed namespace $ns"
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE"
        say "removed bridge $BRIDGE"
    fi
}

# -- 3. configuration ---------------------------------------------------------------------
CONFIG_CHANGED=0
write_if_changed() {  # path content
    local path=$1 content=$2
    [[ -f $path && $(cat "$path") == "$content" ]] && return
    printf '%s\n' "$content" >"$path"
    CONFIG_CHANGED=1
    say "wrote $path"
}

configure() {
    mkdir -p "$STATE"/{etc,run,log,ctld,spool,dev,munge,check}
    chmod 0711 "$STATE/munge"  # munged: others may not write there, but must pass through
    local node i
    for node in "${NODES[@]}"; do mkdir -p "$STATE/spool/$node"; done
    # gres.conf's File=: slurmd wants character devices (a regular file is "not a valid
    # character or block device": the GPUs are counted but get no index, so no
    # CUDA_VISIBLE_DEVICES). NVIDIA's numbers (195, N); without the driver nothing opens them.
    local dev
    for i in 0 1; do
        dev=$STATE/dev/nvidia$i
        [[ -c $dev ]] && continue
        rm -f "$dev"
        mknod -m 0666 "$dev" c 195 "$i"
        CONFIG_CHANGED=1
    done
    if [[ ! -s $STATE/munge/munge.key ]]; then
        (umask 077; dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none)
        say "made a munge key"
    fi
    local nodelines=""
    for i in "${!NODES[@]}"; do
        nodelines+="NodeName=${NODES[$i]} NodeAddr=$(node_addr $((i + 1))) NodeHostname=${NODES[$i]} CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1024 Gres=gpu:tesla:2 State=UNKNOWN"$'\n'
    done
    local nodelist
    nodelist=$(IFS=,; echo "${NODES[*]}")
    write_if_changed "$CONF" "# written by jobgate scripts/setup-slurm.sh (a throw-away test cluster)
ClusterName=jobgate-test
SlurmctldHost=$(hostname -s)($HOST_ADDR)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: processes tracked by parentage, no task containment
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
# the node's CPUs and memory as written here, whatever the host has
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
GresTypes=gpu
MpiDefault=none
MailProg=/bin/true
# no slurmdbd: sacct has no data; finished jobs: scontrol show job (MinJobAge), jobcomp.txt
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=300
${nodelines}PartitionName=debug Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP"
    write_if_changed "$STATE/etc/gres.conf" "# written by jobgate scripts/setup-slurm.sh: dummy GPUs (regular files)
NodeName=$nodelist Name=gpu Type=tesla File=$STATE/dev/nvidia[0-1]"
}

# -- 4. daemons --------------------------------------------------------------------------------
# Each daemon runs in the foreground under setsid, its pid (the exec'd daemon's own) in
# STATE/run/NAME.jobgate.pid; it counts as ours while that pid's command line names our
# state folder.
pidfile_of() { echo "$STATE/run/$1.jobgate.pid"; }

daemon_pid() {  # name: the recorded pid, if that process is alive and ours
    local file pid
    file=$(pidfile_of "$1")
    [[ -f $file ]] || return 1
    pid=$(cat "$file")
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$STATE/" || return 1
    echo "$pid"
}

stop_pids() {  # pids...: TERM, up to 10 s, then KILL
    local pid _ alive
    kill "$@" 2>/dev/null || true
    for _ in $(seq 100); do
        alive=0
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [[ $alive == 0 ]] && return
        sleep 0.1
    done
    kill -9 "$@" 2>/dev/null || true
}

start_daemon() {  # name command...: in the background, its pid recorded
    local name=$1 file
    shift
    file=$(pidfile_of "$name")
    rm -f "$file"
    # shellcheck disable=SC2016  # expanded by that sh: it records its own pid, then execs
    setsid sh -c 'echo $$ >"$0"; exec "$@"' "$file" "$@" \
        </dev/null >>"$STATE/log/$name.out" 2>&1 &
    local _
    for _ in $(seq 50); do [[ -s $file ]] && break; sleep 0.1; done
}

wait_for() {  # seconds what command...: poll every 0.5 s
    local seconds=$1 what=$2 _
    shift 2
    for _ in $(seq $((seconds * 2))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "$what within $seconds s (logs in $STATE/log)"
}

munge_answers() {
    munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"
}

ctld_answers() {
    scontrol ping | grep -q "is UP"
}

nodes_respond() {  # every node registered and responding: no "*" (not responding), not
    local states  # unknown; a node drained or set down by hand is left as it is
    states=$(sinfo -h -N -o '%N %t') || return 1
    [[ $(wc -l <<<"$states") -eq ${#NODES[@]} ]] || return 1
    ! grep -Eq '\*|unk' <<<"$states"
}

NAMES=(munged slurmctld "${NODES[@]/#/slurmd-}")

running() {  # every daemon alive, slurmctld answering, every node responding
    local name
    for name in "${NAMES[@]}"; do daemon_pid "$name" >/dev/null || return 1; done
    ctld_answers && nodes_respond
}

stop_daemons() {  # names...
    local name pid pids=()
    for name in "$@"; do
        pid=$(daemon_pid "$name") || continue
        pids+=("$pid")
        say "stopping $name (pid $pid)"
    done
    [[ ${#pids[@]} -eq 0 ]] || stop_pids "${pids[@]}"
}

start_daemons() {
    local pid node i
    if pid=$(daemon_pid munged); then
        say "munged already running (pid $pid)"
    else
        say "starting munged"
        start_daemon munged munged --foreground --force --socket="$MUNGE_SOCKET" \
            --key-file="$STATE/munge/munge.key" --pid-file="$STATE/munge/munged.pid" \
            --seed-file="$STATE/munge/munged.seed" --log-file="$STATE/log/munged.log"
    fi
    wait_for 10 "munged did not answer on $MUNGE_SOCKET" munge_answers
    if pid=$(daemon_pid slurmctld); then
        say "slurmctld already running (pid $pid)"
    else
        # one such cluster per host: another checkout's (or a real) slurmctld on the port
        # would answer our clients with a munge key of its own
        if ss -Hltn 'sport = :6817' | grep -q .; then
            die "something else listens on port 6817 (another checkout's test cluster? stop it with that checkout's scripts/setup-slurm.sh --stop)"
        fi
        say "starting slurmctld (state: $STATE/ctld)"
        start_daemon slurmctld slurmctld -D -f "$CONF"
    fi
    wait_for 30 "slurmctld did not answer" ctld_answers
    for i in "${!NODES[@]}"; do
        node=${NODES[$i]}
        if pid=$(daemon_pid "slurmd-$node"); then
            say "slurmd $node already running (pid $pid)"
            continue
        fi
        say "starting slurmd $node ($(node_addr $((i + 1))), namespace $(netns_of "$node"))"
        # nsenter, not ip netns exec: that one remounts /sys in a mount namespace of its
        # own, without /sys/fs/cgroup, and slurmd 22.05 initialises its cgroup plugin even
        # with proctrack/linuxproc. nsenter and unshare exec (no fork): the recorded pid
        # is slurmd's.
        # shellcheck disable=SC2016
        start_daemon "slurmd-$node" nsenter --net="/run/netns/$(netns_of "$node")" \
            unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" \
            slurmd -D -N "$node" -f "$CONF"
    done
    wait_for 60 "the nodes did not all respond (sinfo -N)" nodes_respond
}

# -- the self-check --------------------------------------------------------------------------------
job_state() { scontrol show job -o "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }

check() {
    local node id state out failed=0 expect got
    rm -f "$STATE/check"/*.out
    for node in "${NODES[@]}"; do
        # shellcheck disable=SC2016  # for the job's shell
        id=$(sbatch --parsable --nodelist="$node" --gres=gpu:1 -o "$STATE/check/%j.out" \
            --wrap 'hostname; echo "$CUDA_VISIBLE_DEVICES"')
        state=
        for _ in $(seq 60); do
            state=$(job_state "$id")
            [[ $state =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING)$ ]] || break
            sleep 0.5
        done
        out=$STATE/check/$id.out
        expect="$node"$'\n'"0"
        got=$(cat "$out" 2>/dev/null || true)
        if [[ $state == COMPLETED && $got == "$expect" ]]; then
            say "check: job $id on $node: ok"
        else
            say "check: job $id on $node: $state, output: ${got//$'\n'/ | } (want ${expect//$'\n'/ | })"
            scancel "$id" 2>/dev/null || true
            failed=1
        fi
    done
    expect=$(printf '%s\n' "${NODES[@]}")
    got=$(timeout 30 srun -N "${#NODES[@]}" -l hostname 2>&1 | sort | sed 's/^[0-9]*: //') || true
    if [[ $got == "$expect" ]]; then
        say "check: srun -N${#NODES[@]} hostname: ok"
    else
        say "check: srun -N${#NODES[@]} hostname: ${got//$'\n'/ | }"
        failed=1
    fi
    [[ $failed == 0 ]] || die "check failed"
}

# -- main -------------------------------------------------------------------------------------------
if [[ $MODE == stop ]]; then
    if [[ -f $CONF ]] && command -v squeue >/dev/null && ctld_answers 2>/dev/null; then
        ids=$(squeue -h -o %i)
        if [[ -n $ids ]]; then
            say "cancelling jobs ${ids//$'\n'/ }"
            # shellcheck disable=SC2086
            scancel $ids || true
            sleep 2
        fi
    fi
    stop_daemons "${NODES[@]/#/slurmd-}"
    stop_daemons slurmctld munged
    remove_network
    exit 0
fi

install_missing "${PACKAGES[@]}"
if [[ -f $CONF ]] && running 2>/dev/null && configure && [[ $CONFIG_CHANGED == 0 ]]; then
    say "slurm cluster already running"
else
    configure
    if [[ $CONFIG_CHANGED == 1 ]]; then  # its configuration changed: every daemon anew
        stop_daemons "${NODES[@]/#/slurmd-}" slurmctld
    fi
    ensure_network
    start_daemons
    say "slurm cluster up: nodes ${NODES[*]} (log: $STATE/log)"
fi
[[ $MODE == check ]] && check
echo "SLURM_CONF=$CONF"
