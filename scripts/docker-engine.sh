#!/usr/bin/env bash
# Make a Docker engine available to imagebuild.
#
#   scripts/docker-engine.sh              reuse the engine DOCKER_HOST (or the default socket) reaches; otherwise
#                                         install Debian's docker.io if dockerd is missing and start
#                                         `dockerd --bridge=none --iptables=false --ip-masq=false` in the background.
#                                         Idempotent: a second call finds the engine and does nothing.
#   scripts/docker-engine.sh --fresh DIR  start a private engine (own socket, data-root, exec-root, pidfile) under DIR,
#                                         next to any running one, so a CI run cannot pass on leftover images.
#                                         Prints `export DOCKER_HOST=unix://DIR/docker.sock` on stdout:
#                                           eval "$(scripts/docker-engine.sh --fresh /tmp/ibci)"
#   scripts/docker-engine.sh --stop DIR   stop the private engine started with --fresh DIR (the data stays in DIR).
#
# Never creates bridge networks: builds use host networking, test containers `none` or host.
# Messages go to stderr; only the export line goes to stdout.
set -euo pipefail

WAIT_SECONDS="${DOCKER_ENGINE_WAIT:-60}"
DOCKERD_FLAGS=(--bridge=none --iptables=false --ip-masq=false)
# --fresh only: another dockerd binary and flags of its own (scripts/modern-engine.sh: its 26.1 dockerd + --config-file)
DOCKERD="${IMAGEBUILD_DOCKERD:-dockerd}"
read -r -a EXTRA_FLAGS <<<"${IMAGEBUILD_DOCKERD_FLAGS:-}"

log() { printf 'docker-engine: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
}

answers() {  # answers [DOCKER_HOST value]
    if [ -n "${1:-}" ]; then
        DOCKER_HOST="$1" timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
    else
        timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
    fi
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
        die "need root to run: $*"
    fi
}

ensure_dockerd() {
    if [ "$DOCKERD" != dockerd ]; then
        [ -x "$DOCKERD" ] || die "IMAGEBUILD_DOCKERD=$DOCKERD is not an executable file"
        return
    fi
    if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
        return
    fi
    command -v apt-get >/dev/null 2>&1 || die "dockerd is not installed and apt-get is missing: install Docker by hand"
    log "installing Debian's docker.io"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >&2
    command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd is still not on PATH"
}

wait_for() {  # wait_for HOST PID LOGFILE
    local host="$1" pid="$2" logfile="$3" i
    for ((i = 0; i < WAIT_SECONDS * 2; i++)); do
        if answers "$host"; then return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            log "dockerd exited; last lines of $logfile:"
            tail -n 20 "$logfile" >&2 || true
            return 1
        fi
        sleep 0.5
    done
    log "dockerd did not answer within ${WAIT_SECONDS}s; last lines of $logfile:"
    tail -n 20 "$logfile" >&2 || true
    return 1
}

cmd_default() {
    if answers; then
        log "engine answers at ${DOCKER_HOST:-unix:///var/run/docker.sock} (server $(docker version --format '{{.Server.Version}}' 2>/dev/null))"
        return 0
    fi
    if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST}" != "unix:///var/run/docker.sock" ]; then
        die "DOCKER_HOST=${DOCKER_HOST} does not answer; start that engine, or unset DOCKER_HOST to use a local one"
    fi
    ensure_dockerd
    # a dockerd may be starting right now (another caller): give it a moment before starting a second one
    if [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid 2>/dev/null)" 2>/dev/null; then
        log "dockerd (pid $(cat /var/run/docker.pid)) is running but not answering yet; waiting"
        wait_for "" "$(cat /var/run/docker.pid)" /var/log/dockerd.log && return 0
        die "dockerd pid $(cat /var/run/docker.pid) does not answer; see /var/log/dockerd.log"
    fi
    local logfile=/var/log/dockerd.log
    log "starting dockerd ${DOCKERD_FLAGS[*]} (log: $logfile)"
    as_root sh -c "setsid nohup dockerd ${DOCKERD_FLAGS[*]} >>$logfile 2>&1 </dev/null & echo \$! >/tmp/.docker-engine.pid"
    wait_for "" "$(cat /tmp/.docker-engine.pid)" "$logfile" || die "could not start dockerd"
    log "engine answers at unix:///var/run/docker.sock"
}

cmd_fresh() {
    local dir="$1"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    local sock="$dir/docker.sock" host="unix://$dir/docker.sock"
    # containerd's socket lives under exec-root: unix socket paths are limited to 107 bytes
    if [ "${#dir}" -gt 60 ]; then die "--fresh DIR path is too long for unix sockets (${#dir} > 60): $dir"; fi
    if answers "$host"; then
        log "private engine already answers at $host"
        echo "export DOCKER_HOST=$host"
        return 0
    fi
    ensure_dockerd
    if [ -f "$dir/docker.pid" ] && kill -0 "$(cat "$dir/docker.pid")" 2>/dev/null; then
        die "dockerd pid $(cat "$dir/docker.pid") owns $dir but does not answer; run --stop $dir first"
    fi
    rm -f "$sock" "$dir/docker.pid"
    mkdir -p "$dir/data" "$dir/exec"
    local logfile="$dir/dockerd.log"
    log "starting a private dockerd in $dir (log: $logfile)"
    # own socket, data-root, exec-root (its own managed containerd lives there) and pidfile; no listeners
    # elsewhere, no bridge, no iptables
    as_root sh -c "setsid nohup '$DOCKERD' ${DOCKERD_FLAGS[*]} ${EXTRA_FLAGS[*]} -H '$host' --data-root '$dir/data' --exec-root '$dir/exec' \
        --pidfile '$dir/docker.pid' >>'$logfile' 2>&1 </dev/null & echo \$! >'$dir/.launcher.pid'"
    wait_for "$host" "$(cat "$dir/.launcher.pid")" "$logfile" || die "could not start the private dockerd in $dir"
    log "private engine answers at $host"
    echo "export DOCKER_HOST=$host"
}

unmount_under() {  # dockerd can leave mounts behind (exec-root/netns/default): unmount them so DIR can go
    local dir="$1" m
    awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
        as_root umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
}

cmd_stop() {
    local dir="$1" pid="" i
    [ -d "$dir" ] || die "no such directory: $dir"
    dir="$(cd "$dir" && pwd)"
    if [ -f "$dir/docker.pid" ]; then pid="$(cat "$dir/docker.pid")"; elif [ -f "$dir/.launcher.pid" ]; then
        pid="$(cat "$dir/.launcher.pid")"
    fi
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        log "no private engine running in $dir"
        unmount_under "$dir"
        return 0
    fi
    # refuse to stop an engine that is not the private one of DIR (never the shared default engine)
    if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--pidfile $dir/docker.pid"; then
        die "pid $pid is not the private dockerd of $dir; not stopping it"
    fi
    log "stopping private dockerd pid $pid"
    as_root kill -TERM "$pid"
    for ((i = 0; i < 60; i++)); do
        kill -0 "$pid" 2>/dev/null || { log "stopped"; rm -f "$dir/.launcher.pid"; unmount_under "$dir"; return 0; }
        sleep 0.5
    done
    die "dockerd pid $pid did not stop within 30s"
}

case "${1:-}" in
    "") cmd_default ;;
    --fresh) [ -n "${2:-}" ] || { usage; exit 2; }; cmd_fresh "$2" ;;
    --stop) [ -n "${2:-}" ] || { usage; exit 2; }; cmd_stop "$2" ;;
    -h | --help) usage ;;
    *) usage; exit 2 ;;
esac
