#!/usr/bin/env bash
# Register Debian's qemu-user-static handlers in binfmt_misc, so this amd64 machine runs arm64 binaries: the
# bootstrap of an arm64 rootfs (mmdebstrap) and the RUN steps and smoke tests of linux/arm64 images go through it.
#
#   scripts/binfmt.sh [--check] [ARCH ...]     ARCH: the uname -m name, default aarch64
#
# Mounts /proc/sys/fs/binfmt_misc when it is not mounted, then registers /usr/lib/binfmt.d/qemu-ARCH.conf (the
# qemu-user-static package's line) with the F flag: the kernel opens the interpreter once, at registration, so it
# runs inside containers whose filesystem has no qemu. A handler already registered with F is left alone; one
# without F (or disabled) is replaced. Says what it changed; a second run changes nothing. --check changes nothing
# and exits 1 when a handler is missing. Needs root to change anything (and qemu-user-static: scripts/system-deps.sh).
set -euo pipefail
check=false
arches=()
for arg in "$@"; do
  case "$arg" in
    --check) check=true ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "binfmt: unknown option $arg (use --check)" >&2; exit 2 ;;
    *) arches+=("$arg") ;;
  esac
done
((${#arches[@]})) || arches=(aarch64)
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
  if [[ -e "$entry" ]] && grep -qx enabled "$entry" && grep -q '^flags: .*F' "$entry"; then
    echo "binfmt: qemu-$arch already registered with the F flag ($(sed -n 's/^interpreter //p' "$entry")): unchanged"
    continue
  fi
  if $check; then
    echo "binfmt: qemu-$arch is not registered with the F flag: run scripts/binfmt.sh $arch (as root)" >&2
    status=1
    continue
  fi
  conf="/usr/lib/binfmt.d/qemu-$arch.conf"
  if [[ ! -r "$conf" ]]; then
    echo "binfmt: $conf is missing: apt-get install qemu-user-static (scripts/system-deps.sh installs it)" >&2
    exit 1
  fi
  line="$(grep -v '^#' "$conf" | head -n1)"
  flags="${line##*:}"
  [[ "$flags" == *F* ]] || line="${line}F"  # F: the interpreter works inside containers too
  if [[ -e "$entry" ]]; then
    echo -1 > "$entry"  # registered without F or disabled: replace it
    echo "binfmt: removed the earlier qemu-$arch handler (it lacked the F flag or was disabled)"
  fi
  printf '%s' "$line" > "$dir/register"
  echo "binfmt: registered qemu-$arch ($(sed -n 's/^interpreter //p' "$entry"), flags $(sed -n 's/^flags: //p' "$entry"))"
  changed=1
done
((changed)) || $check || echo "binfmt: nothing to change"
exit "$status"
