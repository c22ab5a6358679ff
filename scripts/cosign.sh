#!/usr/bin/env bash
# cosign (sigstore) from Debian trixie, for signing pushed images and verifying them (imagebuild push --sign-key,
# imagebuild verify). trixie's cosign 2.5.0 is one static Go binary (Depends: libc6 >= 2.34), so it runs on bookworm.
# Nothing here touches the host's apt sources or dpkg database.
#
#   scripts/cosign.sh install   fetch trixie's InRelease, verify it with gpgv against the Debian archive keys the
#                               project pins, check cosign's .deb against the verified Packages index (the same
#                               functions as modern-engine.sh: scripts/trixie-debs.sh), extract the binary to
#                               TOOLS/bin/cosign (TOOLS: $IMAGEBUILD_TOOLS_DIR, default .tools/). Idempotent.
#   scripts/cosign.sh --path    print the installed binary's path (what imagebuild runs; IMAGEBUILD_COSIGN overrides)
#
# Messages go to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
TOOLS="${IMAGEBUILD_TOOLS_DIR:-$root/.tools}"
# the upstream version this project runs (the Debian revision is whatever the verified index lists); imagebuild's
# sign/cosign.py reads the same binary
COSIGN_VERSION=2.5.0
BIN="$TOOLS/bin/cosign"

log() { printf 'cosign.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; }

# shellcheck source=scripts/trixie-debs.sh
. "$here/trixie-debs.sh"

installed() {
    [ -x "$BIN" ] && [ "$(cat "$BIN.version" 2>/dev/null)" = "$COSIGN_VERSION" ]
}

cmd_install() {
    if installed; then
        log "cosign $COSIGN_VERSION is in $BIN"
        return 0
    fi
    for tool in curl gpg gpgv xz dpkg-deb sha256sum; do need "$tool"; done
    local packages deb tmp
    packages="$(verified_index)"
    deb="$(fetch_deb "$packages" cosign "$COSIGN_VERSION")"
    tmp="$(mktemp -d "$TOOLS/.extract.XXXXXX")"
    dpkg-deb -x "$deb" "$tmp/cosign"
    [ -x "$tmp/cosign/usr/bin/cosign" ] || { rm -rf "$tmp"; die "$(basename "$deb") holds no usr/bin/cosign"; }
    mkdir -p "$TOOLS/bin"
    install -m 0755 "$tmp/cosign/usr/bin/cosign" "$BIN.part"
    mv "$BIN.part" "$BIN"
    rm -rf "$tmp"
    echo "$COSIGN_VERSION" >"$BIN.version"
    log "installed cosign $COSIGN_VERSION ($BIN)"
}

case "${1:-}" in
    install) cmd_install ;;
    --path) installed || die "cosign is not installed: run \`make install\` (scripts/cosign.sh install)"; echo "$BIN" ;;
    -h | --help) usage ;;
    *) usage; exit 2 ;;
esac
