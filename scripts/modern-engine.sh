#!/usr/bin/env bash
# A modern Docker engine + buildx for the BuildKit backend, next to Debian 12's docker.io 20.10 (BuildKit v0.8, which
# has no named contexts). Debian 13 (trixie) ships docker.io 26.1.5, the containerd 1.7.24 it is built against and
# docker-buildx 0.13.1; all three run on bookworm (libc6 >= 2.34), with bookworm's runc (trixie's needs libc6 2.38).
# Bookworm's containerd 1.6.20 is not the engine's pair: built with Go 1.19, it hashes every pulled byte without the
# CPU's SHA extensions (28 % of a node's pull, bench/loop-cpu.md round 24). Nothing here touches the host's apt sources
# or dpkg database.
#
#   scripts/modern-engine.sh install       fetch trixie's InRelease, verify it with gpgv against the Debian archive
#                                          keys the project pins (compat/data/keys/debian-archive.asc), check each
#                                          .deb's sha256 against the verified Packages index, extract dockerd and
#                                          containerd into TOOLS/docker-26.1.5/ and the buildx plugin into
#                                          TOOLS/docker-config/cli-plugins/ (TOOLS: $IMAGEBUILD_TOOLS_DIR, default
#                                          .tools/). Idempotent.
#   scripts/modern-engine.sh --fresh DIR   install if needed, then start a private 26.1 dockerd under DIR (own socket,
#                                          data-root, exec-root, pidfile; no bridge, no iptables; the containerd image
#                                          store, so the docker driver can export a registry cache). Prints
#                                            export DOCKER_HOST=unix://DIR/docker.sock
#                                            export DOCKER_CONFIG=TOOLS/docker-config
#   scripts/modern-engine.sh --stop DIR    stop the private engine started with --fresh DIR (the data stays in DIR).
#   scripts/modern-engine.sh --env         print only the DOCKER_CONFIG export (buildx for any engine, e.g. a remote
#                                          builder named with --builder).
#
# Messages go to stderr; only export lines go to stdout.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
TOOLS="${IMAGEBUILD_TOOLS_DIR:-$root/.tools}"
# package -> the upstream version this project runs (the Debian revision is whatever the verified index lists)
DOCKERD_VERSION=26.1.5
CONTAINERD_VERSION=1.7.24~ds1
BUILDX_VERSION=0.13.1
ENGINE_DIR="$TOOLS/docker-$DOCKERD_VERSION"
CONFIG_DIR="$TOOLS/docker-config"

log() { printf 'modern-engine: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; }

# fetch, verified_index, fetch_deb, need: trixie's packages, verified against the pinned archive keys
# shellcheck source=scripts/trixie-debs.sh
. "$here/trixie-debs.sh"

installed() {
    [ -x "$ENGINE_DIR/usr/sbin/dockerd" ] && [ -x "$CONFIG_DIR/cli-plugins/docker-buildx" ] \
        && [ -x "$ENGINE_DIR/usr/bin/containerd" ] \
        && [ "$(cat "$ENGINE_DIR/.version" 2>/dev/null)" = "$DOCKERD_VERSION $CONTAINERD_VERSION $BUILDX_VERSION" ]
}

cmd_install() {
    if installed; then
        log "docker.io $DOCKERD_VERSION, containerd $CONTAINERD_VERSION and docker-buildx $BUILDX_VERSION are in $TOOLS"
        return 0
    fi
    for tool in curl gpg gpgv xz dpkg-deb sha256sum; do need "$tool"; done
    local packages engine_deb containerd_deb buildx_deb tmp
    packages="$(verified_index)"
    engine_deb="$(fetch_deb "$packages" docker.io "$DOCKERD_VERSION")"
    containerd_deb="$(fetch_deb "$packages" containerd "$CONTAINERD_VERSION")"
    buildx_deb="$(fetch_deb "$packages" docker-buildx "$BUILDX_VERSION")"
    tmp="$(mktemp -d "$TOOLS/.extract.XXXXXX")"
    dpkg-deb -x "$engine_deb" "$tmp/engine"
    # containerd, its runc shim and ctr beside dockerd: dockerd starts the containerd it finds first on PATH
    dpkg-deb -x "$containerd_deb" "$tmp/engine"
    dpkg-deb -x "$buildx_deb" "$tmp/buildx"
    rm -rf "$ENGINE_DIR"
    mv "$tmp/engine" "$ENGINE_DIR"
    mkdir -p "$CONFIG_DIR/cli-plugins"
    install -m 0755 "$tmp/buildx/usr/libexec/docker/cli-plugins/docker-buildx" "$CONFIG_DIR/cli-plugins/docker-buildx"
    rm -rf "$tmp"
    # the containerd image store: the docker driver can then export a registry cache (--cache-to type=registry)
    printf '{"features": {"containerd-snapshotter": true}}\n' >"$ENGINE_DIR/daemon.json"
    echo "$DOCKERD_VERSION $CONTAINERD_VERSION $BUILDX_VERSION" >"$ENGINE_DIR/.version"
    log "installed dockerd $DOCKERD_VERSION and containerd $CONTAINERD_VERSION ($ENGINE_DIR)," \
        "buildx $BUILDX_VERSION ($CONFIG_DIR/cli-plugins)"
}

cmd_fresh() {
    local dir="$1" exports
    cmd_install
    need runc  # bookworm's, from docker.io 20.10's dependencies
    # scripts/docker-engine.sh owns the private-engine life cycle; this engine differs only in binary and config
    exports="$(PATH="$ENGINE_DIR/usr/sbin:$ENGINE_DIR/usr/bin:$PATH" IMAGEBUILD_DOCKERD="$ENGINE_DIR/usr/sbin/dockerd" \
        IMAGEBUILD_DOCKERD_FLAGS="--config-file $ENGINE_DIR/daemon.json" "$here/docker-engine.sh" --fresh "$dir")"
    echo "$exports"
    echo "export DOCKER_CONFIG=$CONFIG_DIR"
}

case "${1:-}" in
    install) cmd_install ;;
    --fresh) [ -n "${2:-}" ] || { usage; exit 2; }; cmd_fresh "$2" ;;
    --stop) [ -n "${2:-}" ] || { usage; exit 2; }; exec "$here/docker-engine.sh" --stop "$2" ;;
    --env) installed || die "buildx is not installed: run \`make install\`"; echo "export DOCKER_CONFIG=$CONFIG_DIR" ;;
    -h | --help) usage ;;
    *) usage; exit 2 ;;
esac
