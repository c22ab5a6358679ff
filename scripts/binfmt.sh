#!/usr/bin/env bash
# Register QEMU's user-mode handlers in binfmt_misc, so this amd64 machine runs arm64 binaries: the bootstrap of an
# arm64 rootfs (mmdebstrap) and the RUN steps and smoke tests of linux/arm64 images go through it.
#
#   scripts/binfmt.sh [--check] [ARCH ...]     ARCH: the uname -m name, default aarch64
#
# The interpreter is Debian trixie's qemu-user (QEMU 10.0; one static binary), fetched and verified as the modern
# engine is (scripts/trixie-debs.sh) into TOOLS/qemu-VERSION/: bookworm's qemu-user-static 7.2 runs import torch but
# any tensor op of torch 2.13's aarch64 wheel dies with SIGSEGV under it (torch.ones(2) + 1; QEMU 10.0.13 runs it).
# Mounts /proc/sys/fs/binfmt_misc when it is not mounted, then registers the handler (the magic and mask of
# /usr/lib/binfmt.d/qemu-ARCH.conf) with the F flag: the kernel opens the interpreter once, at registration, so it
# runs inside containers whose filesystem has no qemu. A handler registered with F whose QEMU is 10 or newer is left
# alone; an older one, one without F or a disabled one is replaced. Says what it changed; a second run changes
# nothing. --check changes nothing and exits 1 when a handler is missing or older. Needs root to change anything.
set -euo pipefail
check=false
arches=()
for arg in "$@"; do
  case "$arg" in
    --check) check=true ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "binfmt: unknown option $arg (use --check)" >&2; exit 2 ;;
    *) arches+=("$arg") ;;
  esac
done
((${#arches[@]})) || arches=(aarch64)
QEMU_VERSION=10.0.13
QEMU_MIN_MAJOR=10
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
TOOLS="${IMAGEBUILD_TOOLS_DIR:-$root/.tools}"
QEMU_DIR="$TOOLS/qemu-$QEMU_VERSION"
log() { printf 'binfmt: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=scripts/trixie-debs.sh
. "$here/trixie-debs.sh"

qemu_major() {  # qemu_major INTERPRETER: the major version its --version prints (0 when it does not answer)
  local v  # an ARCH-binfmt-P name refuses --version: it is a link to the binary, which answers
  v="$("$(readlink -f "$1")" --version 2>/dev/null | sed -n 's/^qemu-[a-z0-9_]* version \([0-9]*\)\..*/\1/p' | head -n1)"
  echo "${v:-0}"
}

interpreter_for() {  # interpreter_for ARCH: trixie's qemu-ARCH, verified and extracted once; prints ARCH-binfmt-P,
  # a link to it (QEMU started under that name reads the P flag's argv, as Debian's packages register it)
  local arch="$1" bin="$QEMU_DIR/qemu-$1" link="$QEMU_DIR/$1-binfmt-P" packages deb tmp
  if [[ -x "$bin" ]] && [[ "$(cat "$QEMU_DIR/version" 2>/dev/null)" == "$QEMU_VERSION" ]]; then
    ln -sfn "qemu-$arch" "$link"
    echo "$link"
    return
  fi
  for tool in curl gpg gpgv xz dpkg-deb sha256sum; do need "$tool"; done
  packages="$(verified_index)"
  deb="$(fetch_deb "$packages" qemu-user "1:$QEMU_VERSION")"
  mkdir -p "$QEMU_DIR"
  tmp="$(mktemp -d "$QEMU_DIR/.extract.XXXXXX")"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" "./usr/bin/qemu-$arch" \
    || { rm -rf "$tmp"; die "$(basename "$deb") holds no usr/bin/qemu-$arch"; }
  install -m 0755 "$tmp/usr/bin/qemu-$arch" "$bin.part"
  mv "$bin.part" "$bin"
  rm -rf "$tmp"
  echo "$QEMU_VERSION" >"$QEMU_DIR/version"
  ln -sfn "qemu-$arch" "$link"
  log "installed qemu-$arch $QEMU_VERSION from trixie's qemu-user ($bin)"
  echo "$link"
}
dir=/proc/sys/fs/binfmt_misc
changed=0

if [[ ! -e "$dir/register" ]]; then
  if $check; then
    echo "binfmt: $dir is not mounted: run scripts/binfmt.sh (as root) to mount it and register ${arches[*]}" >&2
    exit 1
  fi
  mount -t binfmt_misc binfmt_misc "$dir"
  echo "binfmt: mounted binfmt_misc on $dir"
  changed=1
fi

status=0
for arch in "${arches[@]}"; do
  if [[ ! "$arch" =~ ^[a-z0-9_]+$ ]]; then
    echo "binfmt: $arch is not an architecture name like aarch64" >&2
    exit 2
  fi
  entry="$dir/qemu-$arch"
  current="$(sed -n 's/^interpreter //p' "$entry" 2>/dev/null || true)"
  why=""
  if [[ -e "$entry" ]] && grep -qx enabled "$entry" && grep -q '^flags: .*F' "$entry"; then
    major="$(qemu_major "$current")"
    if ((major >= QEMU_MIN_MAJOR)); then
      echo "binfmt: qemu-$arch already registered with the F flag ($current, QEMU $major): unchanged"
      continue
    fi
    why="its QEMU ($current) is older than $QEMU_MIN_MAJOR.0 or does not say its version: torch's CPU kernels crash under QEMU 7.2"
  else
    why="it lacked the F flag or was disabled"
  fi
  if $check; then
    echo "binfmt: qemu-$arch is not registered with the F flag and QEMU >= $QEMU_MIN_MAJOR: run scripts/binfmt.sh $arch (as root)" >&2
    status=1
    continue
  fi
  interpreter="$(interpreter_for "$arch")"
  conf="/usr/lib/binfmt.d/qemu-$arch.conf"
  if [[ ! -r "$conf" ]]; then
    echo "binfmt: $conf is missing: apt-get install qemu-user-static (scripts/system-deps.sh installs it)" >&2
    exit 1
  fi
  line="$(grep -v '^#' "$conf" | head -n1)"
  flags="${line##*:}"
  line="${line%:*}"
  line="${line%:*}:$interpreter:${flags}"  # :name:type:offset:magic:mask:interpreter:flags, ours as interpreter
  [[ "$flags" == *F* ]] || line="${line}F"  # F: the interpreter works inside containers too
  if [[ -e "$entry" ]]; then
    echo -1 > "$entry"
    echo "binfmt: removed the earlier qemu-$arch handler ($why)"
  fi
  printf '%s' "$line" > "$dir/register"
  echo "binfmt: registered qemu-$arch ($(sed -n 's/^interpreter //p' "$entry"), flags $(sed -n 's/^flags: //p' "$entry"))"
  changed=1
done
((changed)) || $check || echo "binfmt: nothing to change"
exit "$status"
