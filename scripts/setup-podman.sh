#!/usr/bin/env bash
# Prepare this host for jobgate's rootless Podman runtime. Idempotent; run as root.
#
#   sudo scripts/setup-podman.sh            # user "jobgate"
#   sudo JOBGATE_PODMAN_USER=ci scripts/setup-podman.sh
#   sudo scripts/setup-podman.sh --restart  # also restart a healthy service (it reads
#                                           # registries.conf only when it starts)
#
# What it does (each step only when needed, so a re-run is cheap):
#   1. installs podman, runc, uidmap, slirp4netns, fuse-overlayfs, catatonit, and netavark +
#      aardvark-dns + iptables (cluster sessions' private networks with DNS; netavark needs
#      iptables and Debian only recommends it), and nftables (the egress rules the worker
#      loads into each container's network namespace, docs/security.md) (Debian);
#   2. creates the unprivileged user with /etc/subuid and /etc/subgid ranges;
#   3. writes its containers.conf (runc, cgroupfs, file events, catatonit, netavark) and
#      storage.conf (overlay) before its first podman command;
#   4. makes /dev/net/tun usable (slirp4netns needs it for networking and published ports);
#   5. on cgroup v1 / hybrid hosts creates /sys/fs/cgroup/{memory,cpu,pids,cpuset}/PARENT
#      owned by the user (the runtime puts each container's limits below it);
#   6. starts the user's Podman API service (no systemd: a pid file and setsid), inside
#      those cgroups, unless it already runs and answers.
# The last line of output is JOBGATE_PODMAN_SOCKET=unix:///run/user/UID/podman/podman.sock.
#
# Environment: JOBGATE_PODMAN_USER (jobgate), JOBGATE_PODMAN_CGROUP_PARENT (jobgate),
# JOBGATE_PODMAN_SUBID_COUNT (65536).
set -euo pipefail

USER_NAME=${JOBGATE_PODMAN_USER:-jobgate}
CGROUP_PARENT=${JOBGATE_PODMAN_CGROUP_PARENT:-jobgate}
SUBID_COUNT=${JOBGATE_PODMAN_SUBID_COUNT:-65536}
PACKAGES=(podman runc uidmap slirp4netns fuse-overlayfs catatonit netavark aardvark-dns iptables nftables)
CGROUP_CONTROLLERS=(memory cpu pids cpuset)

say() { echo "setup-podman: $*" >&2; }
die() { say "error: $*"; exit 1; }

RESTART=0
case ${1:-} in
    "") ;;
    --restart) RESTART=1 ;;
    *) die "usage: $0 [--restart]" ;;
esac

[[ $(id -u) -eq 0 ]] || die "run as root (it installs packages and creates a user)"
[[ $CGROUP_PARENT =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad JOBGATE_PODMAN_CGROUP_PARENT: $CGROUP_PARENT"

# -- 1. packages -----------------------------------------------------------------------
# runc is named in PACKAGES so apt picks it for podman's "crun | runc" (crun 1.8
# refuses rootless containers on hybrid cgroups).
# shellcheck source=scripts/apt.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt.sh"

# -- 2. user and sub-ids -----------------------------------------------------------------
next_subid_start() {  # first id after every range already given out in $1
    awk -F: 'BEGIN { top = 100000 } NF == 3 && $2 + $3 > top { top = $2 + $3 } END { print top }' "$1"
}

ensure_user() {
    if ! id -u "$USER_NAME" >/dev/null 2>&1; then
        say "creating user $USER_NAME"
        useradd --create-home --user-group --shell /usr/sbin/nologin "$USER_NAME"
    fi
    local file start
    for file in /etc/subuid /etc/subgid; do
        touch "$file"
        grep -q "^$USER_NAME:" "$file" && continue
        start=$(next_subid_start "$file")
        echo "$USER_NAME:$start:$SUBID_COUNT" >>"$file"
        say "gave $USER_NAME ids $start-$((start + SUBID_COUNT - 1)) in $file"
    done
}

# -- 3. podman configuration --------------------------------------------------------------
CONFIG_CHANGED=0
write_if_changed() {  # path content: write as the user only when different
    local path=$1 content=$2
    [[ -f $path && $(cat "$path") == "$content" ]] && return
    CONFIG_CHANGED=1
    local dir=$USER_HOME parts part
    IFS=/ read -ra parts <<<"${path#"$USER_HOME"/}"
    for part in "${parts[@]:0:${#parts[@]}-1}"; do  # every level the user's, not only the last
        dir=$dir/$part
        [[ -d $dir ]] || install -d -o "$USER_NAME" -g "$USER_GROUP" -m 0755 "$dir"
    done
    printf '%s\n' "$content" >"$path"
    chown "$USER_NAME:$USER_GROUP" "$path"
    say "wrote $path"
}

init_path() {  # where catatonit lives (Debian: /usr/bin; upstream default: /usr/libexec/podman)
    local p
    for p in /usr/libexec/podman/catatonit /usr/bin/catatonit; do
        [[ -x $p ]] && { echo "$p"; return; }
    done
    die "catatonit not found"
}

configure_podman() {
    local conf=$USER_HOME/.config/containers
    write_if_changed "$conf/containers.conf" "# written by jobgate scripts/setup-podman.sh
[containers]
init_path = \"$(init_path)\"
log_driver = \"k8s-file\"

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"

[network]
# per-session networks with DNS (cluster sessions' main1/sub1 names): docs/cluster-sessions.md
network_backend = \"netavark\""
    local graph=$USER_HOME/.local/share/containers/storage
    if [[ -d $graph && ! -d $graph/overlay && -d $graph/vfs ]]; then
        say "warning: $graph already uses vfs (slow); to switch to overlay run"
        say "  runuser -u $USER_NAME -- podman system reset   (deletes that user's images)"
    fi
    # runroot and graphroot are the rootless defaults, spelt out: Podman 4.3's commit path
    # (buildah) fails with "runroot must be set" when storage.conf leaves them empty.
    write_if_changed "$conf/storage.conf" "# written by jobgate scripts/setup-podman.sh
[storage]
driver = \"overlay\"
runroot = \"/run/user/$USER_UID/containers\"
graphroot = \"$graph\""
}

# -- 4. /dev/net/tun -------------------------------------------------------------------------
ensure_tun() {
    if [[ ! -c /dev/net/tun ]]; then
        mkdir -p /dev/net
        mknod -m 0666 /dev/net/tun c 10 200
        say "created /dev/net/tun"
    elif ! setpriv --reuid "$USER_UID" --regid "$USER_GID" --clear-groups \
            sh -c 'test -r /dev/net/tun && test -w /dev/net/tun'; then
        chmod 0666 /dev/net/tun
        say "made /dev/net/tun usable by $USER_NAME (slirp4netns)"
    fi
}

# -- 5. delegated cgroups (v1 / hybrid only) ----------------------------------------------------
cgroup_v1() { [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; }

ensure_cgroups() {
    cgroup_v1 || return 0
    local c dir f
    for c in "${CGROUP_CONTROLLERS[@]}"; do
        [[ -d /sys/fs/cgroup/$c ]] || { say "warning: no $c controller mounted"; continue; }
        dir=/sys/fs/cgroup/$c/$CGROUP_PARENT
        [[ -d $dir ]] || { mkdir "$dir"; say "created $dir"; }
        if [[ $c == cpuset ]]; then  # a cpuset cgroup takes no task before cpus and mems are set
            for f in cpuset.cpus cpuset.mems; do
                [[ -n $(cat "$dir/$f") ]] || cat "/sys/fs/cgroup/cpuset/$f" >"$dir/$f"
            done
        fi
        chown "$USER_UID:$USER_GID" "$dir" "$dir/cgroup.procs" "$dir/tasks"
    done
}

# -- 6. the API service ----------------------------------------------------------------------------
socket_answers() {
    curl -sf --max-time 2 --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1
}

service_pid() {  # the pid in the pid file, if it is this user's podman service
    local pid
    [[ -f $PIDFILE ]] || return 1
    pid=$(cat "$PIDFILE")
    [[ $pid =~ ^[0-9]+$ ]] && is_service "$pid" || return 1
    echo "$pid"
}

is_service() {  # pid: a "podman system service" of this user on this socket?
    [[ -r /proc/$1/cmdline && $(stat -c %u "/proc/$1" 2>/dev/null) == "$USER_UID" ]] || return 1
    [[ $(tr '\0' ' ' <"/proc/$1/cmdline") == "podman system service --time=0 unix://$SOCKET " ]]
}

service_processes() {  # every such process: rootless podman re-executes itself, so >= 2
    local dir
    for dir in /proc/[0-9]*; do
        is_service "${dir#/proc/}" && echo "${dir#/proc/}"
    done
    return 0
}

stop_processes() {  # pids...: TERM, up to 5 s, then KILL
    local pid _
    kill "$@" 2>/dev/null || true
    for _ in $(seq 50); do
        for pid in "$@"; do is_service "$pid" && break; pid=; done
        [[ -z $pid ]] && return
        sleep 0.1
    done
    kill -9 "$@" 2>/dev/null || true
}

healthy() {  # pid: it answers, and no stray instance shares its socket path
    local p
    socket_answers || return 1
    for p in $(service_processes); do
        [[ $p == "$1" || $(awk '/^PPid:/ { print $2 }' "/proc/$p/status") == "$1" ]] || return 1
    done
}

start_service() {
    local pid strays
    if pid=$(service_pid) && healthy "$pid"; then
        if [[ $RESTART == 0 && $CONFIG_CHANGED == 1 ]]; then
            say "its configuration changed: restarting the podman service"
            RESTART=1
        fi
        if [[ $RESTART == 0 ]]; then
            say "podman service already running (pid $pid)"
            return
        fi
        say "restarting the podman service (pid $pid); containers keep running"
    fi
    # A stray (e.g. the inner process of a service whose outer one was killed with -9)
    # deletes the socket file when it exits, so every instance goes before a new start.
    strays=$(service_processes)
    if [[ -n $strays ]]; then
        [[ $RESTART == 1 ]] || say "stopping podman service processes that do not answer: ${strays//$'\n'/ }"
        # shellcheck disable=SC2086
        stop_processes $strays
    elif [[ -f $PIDFILE ]]; then
        say "removing stale pid file $PIDFILE"
    fi
    rm -f "$PIDFILE" "$SOCKET"
    install -d -o "$USER_NAME" -g "$USER_GROUP" -m 0700 "$RUN_DIR" "$RUN_DIR/podman"
    (
        if cgroup_v1; then  # start inside the delegated cgroups so containers start there too
            for c in "${CGROUP_CONTROLLERS[@]}"; do
                [[ -d /sys/fs/cgroup/$c/$CGROUP_PARENT ]] || continue
                echo "$BASHPID" >"/sys/fs/cgroup/$c/$CGROUP_PARENT/cgroup.procs"
            done
        fi
        cd "$USER_HOME"
        # shellcheck disable=SC2016  # expanded by that sh: it records its own pid, then execs
        exec setsid sh -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" \
            setpriv --reuid "$USER_UID" --regid "$USER_GID" --init-groups \
            env -i HOME="$USER_HOME" USER="$USER_NAME" LOGNAME="$USER_NAME" \
            PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="$RUN_DIR" \
            podman system service --time=0 "unix://$SOCKET"
    ) </dev/null >>"$LOG_FILE" 2>&1 &
    local _
    for _ in $(seq 100); do
        socket_answers && { say "podman service started (pid $(cat "$PIDFILE"), log $LOG_FILE)"; return; }
        sleep 0.1
    done
    tail -n 20 "$LOG_FILE" >&2 || true
    die "podman service did not answer on $SOCKET within 10 s"
}

install_missing "${PACKAGES[@]}"
ensure_user
USER_UID=$(id -u "$USER_NAME")
USER_GID=$(id -g "$USER_NAME")
USER_GROUP=$(id -gn "$USER_NAME")
USER_HOME=$(getent passwd "$USER_NAME" | cut -d: -f6)
RUN_DIR=/run/user/$USER_UID
SOCKET=$RUN_DIR/podman/podman.sock
PIDFILE=$RUN_DIR/podman/jobgate-service.pid
LOG_FILE=/var/log/jobgate-podman-$USER_NAME.log
configure_podman
ensure_tun
ensure_cgroups
start_service
echo "JOBGATE_PODMAN_SOCKET=unix://$SOCKET"
