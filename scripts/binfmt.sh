#!/usr/bin/env bash
# Register QEMU's user-mode handlers in binfmt_misc, so this amd64 machine runs arm64 binaries: the bootstrap of an
# arm64 rootfs (mmdebstrap) and the RUN steps and smoke tests of linux/arm64 images go through it.
#
#   scripts/binfmt.sh [--check] [--force] [ARCH ...]   ARCH: the uname -m name, default aarch64
#   scripts/binfmt.sh --restore [--force]              put back what earlier runs replaced, remove what they added
#
# The interpreter is Debian trixie's qemu-user (QEMU 10.0; one static binary), fetched and verified as the modern
# engine is (scripts/trixie-debs.sh) into TOOLS/qemu-VERSION/: bookworm's qemu-user-static 7.2 runs import torch but
# any tensor op of torch 2.13's aarch64 wheel dies with SIGSEGV under it (torch.ones(2) + 1; QEMU 10.0.13 runs it).
# Mounts /proc/sys/fs/binfmt_misc when it is not mounted, then registers qemu-ARCH (the magic and mask of
# /usr/lib/binfmt.d/qemu-ARCH.conf) with the F flag: the kernel opens the interpreter once, at registration, so it
# runs inside containers whose filesystem has no qemu.
# The existing handler is every entry named qemu-ARCH or whose magic/mask matches ARCH's binaries, under any name
# (aarch64, qemu-aarch64-static). It is left alone when it is qemu-ARCH, enabled, has the flags we register (F among
# them) and its interpreter file holds the same bytes as ours (compared, never run), and no other enabled entry
# matches. Otherwise each is replaced: its registration (name, enabled/disabled, interpreter, flags, offset, magic,
# mask) is written first to the state file, and --restore registers it again exactly. A disabled handler, or
# binfmt_misc disabled as a whole, is an administrator's choice: replaced only with --force.
# Says what it changed; a second run changes nothing. --check changes nothing and exits 1 when the handler is not
# ours. Needs root to change anything. Environment: IMAGEBUILD_BINFMT_DIR (/proc/sys/fs/binfmt_misc),
# IMAGEBUILD_BINFMT_STATE (/var/lib/imagebuild/binfmt.state), IMAGEBUILD_BINFMT_CONF_DIR (/usr/lib/binfmt.d).
set -euo pipefail
check=false
restore=false
force=false
arches=()
for arg in "$@"; do
  case "$arg" in
    --check) check=true ;;
    --restore) restore=true ;;
    --force) force=true ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "binfmt: error: unknown option $arg (use --check, --restore or --force)" >&2; exit 2 ;;
    *) arches+=("$arg") ;;
  esac
done
if $restore && { $check || ((${#arches[@]})); }; then
  echo "binfmt: error: --restore takes no ARCH and no --check: it puts back every handler the state file holds" >&2
  exit 2
fi
((${#arches[@]})) || arches=(aarch64)
QEMU_VERSION=10.0.13
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
TOOLS="${IMAGEBUILD_TOOLS_DIR:-$root/.tools}"
QEMU_DIR="$TOOLS/qemu-$QEMU_VERSION"
DEFAULT_DIR=/proc/sys/fs/binfmt_misc
dir="${IMAGEBUILD_BINFMT_DIR:-$DEFAULT_DIR}"
conf_dir="${IMAGEBUILD_BINFMT_CONF_DIR:-/usr/lib/binfmt.d}"
state="${IMAGEBUILD_BINFMT_STATE:-/var/lib/imagebuild/binfmt.state}"
STATE_HEADER="imagebuild-binfmt-state 1"
log() { printf 'binfmt: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=scripts/trixie-debs.sh
. "$here/trixie-debs.sh"

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

# --- binfmt_misc entries, read as the kernel writes them (fs/binfmt_misc.c): never running an interpreter ---------
# enabled|disabled / interpreter PATH / flags: [P][O][C][F] / offset N / magic HEX / [mask HEX]  (or extension .EXT)
read_entry() {  # read_entry NAME: sets e_state e_interp e_flags e_type e_offset e_magic e_mask; 1 when malformed
  local lines=()
  e_state="" e_interp="" e_flags="" e_type="" e_offset="" e_magic="" e_mask=""
  mapfile -t -n 8 lines <"$dir/$1" || return 1
  [[ "${lines[0]:-}" =~ ^(enabled|disabled)$ ]] || return 1
  e_state="${lines[0]}"
  [[ "${lines[1]:-}" == "interpreter "* ]] || return 1
  e_interp="${lines[1]#interpreter }"
  [[ "${lines[2]:-}" =~ ^flags:\ ?([POCF]*)$ ]] || return 1
  e_flags="${BASH_REMATCH[1]}"
  if [[ "${lines[3]:-}" == "extension "* ]]; then
    e_type=E
    return 0
  fi
  e_type=M
  [[ "${lines[3]:-}" =~ ^offset\ ([0-9]+)$ ]] || return 1
  e_offset="${BASH_REMATCH[1]}"
  [[ "${lines[4]:-}" =~ ^magic\ (([0-9a-f]{2})+)$ ]] || return 1
  e_magic="${BASH_REMATCH[1]}"
  if [[ -n "${lines[5]:-}" ]]; then
    [[ "${lines[5]}" =~ ^mask\ (([0-9a-f]{2})+)$ ]] || return 1
    e_mask="${BASH_REMATCH[1]}"
    ((${#e_mask} == ${#e_magic})) || return 1
  fi
  return 0
}

entry_names() {  # every registered entry of $dir, one a line (not register and status)
  local f
  for f in "$dir"/*; do
    [[ -e "$f" ]] || continue
    f="${f##*/}"
    [[ "$f" == register || "$f" == status ]] || printf '%s\n' "$f"
  done
}

overlaps() {  # overlaps OFF1 MAGIC1 MASK1 OFF2 MAGIC2 MASK2: some file header matches both (hex; empty mask: ff..)
  local o1=$1 m1=$2 k1=$3 o2=$4 m2=$5 k2=$6 p start end a b ka kb
  start=$((o1 > o2 ? o1 : o2))
  end=$((o1 + ${#m1} / 2 < o2 + ${#m2} / 2 ? o1 + ${#m1} / 2 : o2 + ${#m2} / 2))
  for ((p = start; p < end; p++)); do
    a=$((16#${m1:2*(p-o1):2})) b=$((16#${m2:2*(p-o2):2})) ka=255 kb=255
    [[ -z "$k1" ]] || ka=$((16#${k1:2*(p-o1):2}))
    [[ -z "$k2" ]] || kb=$((16#${k2:2*(p-o2):2}))
    if (((a ^ b) & ka & kb)); then return 1; fi
  done
  return 0
}

masked() {  # masked MAGIC MASK: the magic with the mask applied (as the kernel compares it)
  local m=$1 k=$2 i out=""
  [[ -n "$k" ]] || { echo "$m"; return; }
  for ((i = 0; i < ${#m}; i += 2)); do out+="$(printf '%02x' $((16#${m:i:2} & 16#${k:i:2})))"; done
  echo "$out"
}

unescape_hex() {  # unescape_hex FIELD: a binfmt.d magic/mask (\xHH and plain characters) as hex; 1 when malformed
  local s=$1 out=""
  while [[ -n "$s" ]]; do
    if [[ "$s" =~ ^\\x([0-9a-fA-F]{2}) ]]; then
      out+="${BASH_REMATCH[1],,}"
      s="${s:4}"
    elif [[ "${s:0:1}" == \\ ]]; then
      return 1
    else
      out+="$(printf '%02x' "'${s:0:1}")"
      s="${s:1}"
    fi
  done
  echo "$out"
}

escape_hex() {  # escape_hex HEX: \xHH for every byte (what register reads)
  local h=$1 i out=""
  for ((i = 0; i < ${#h}; i += 2)); do out+="\\x${h:i:2}"; done
  printf '%s' "$out"
}

register_line() {  # register_line NAME OFFSET MAGIC MASK INTERPRETER FLAGS: the line for register (ASCII only)
  local d c
  for c in : '|' ';' ',' '#' '%' '!' '@' '='; do
    [[ "$1$5$6" == *"$c"* ]] || { d="$c"; break; }
  done
  [[ -n "${d:-}" ]] || return 1
  printf '%s%s%sM%s%s%s%s%s%s%s%s%s%s' "$d" "$1" "$d" "$d" "$2" "$d" "$(escape_hex "$3")" "$d" \
    "$(if [[ -n "$4" ]]; then escape_hex "$4"; fi)" "$d" "$5" "$d" "$6"
}

file_sha() {  # file_sha PATH: the sha256 of the regular file PATH leads to, "-" when it leads to none (never runs it)
  local t
  t="$(readlink -f -- "$1" 2>/dev/null || true)"
  if [[ -n "$t" && -f "$t" && -r "$t" ]]; then sha256sum <"$t" | cut -d' ' -f1; else echo -; fi
}

same_bytes() {  # same_bytes PATH OURS: PATH leads to a regular file holding the same bytes as OURS (compared, not run)
  local t o
  t="$(readlink -f -- "$1" 2>/dev/null || true)"
  o="$(readlink -f -- "$2" 2>/dev/null || true)"
  [[ -n "$t" && -n "$o" && -f "$t" && -f "$o" ]] || return 1
  [[ "$(stat -c %s -- "$t")" == "$(stat -c %s -- "$o")" ]] || return 1
  cmp -s -- "$t" "$o"
}

kernel_write() {  # kernel_write FILE TEXT: one write to a binfmt_misc file; the kernel's refusal is one error line
  printf '%s' "$2" 2>/dev/null >"$1" || die "the kernel refused writing '$2' to $1"
}

# --- the state file: what was replaced, what we registered -------------------------------------------------------
# imagebuild-binfmt-state 1
# status<TAB>disabled                      binfmt_misc was disabled as a whole (--force enabled it)
# ours<TAB>NAME<TAB>INTERPRETER           an entry this script registered
# saved<TAB>NAME<TAB>STATE<TAB>FLAGS|-<TAB>OFFSET<TAB>MAGIC<TAB>MASK|-<TAB>SHA256|-<TAB>INTERPRETER   one replaced
# end<TAB>SHA256 of the lines above
st_status="" st_ours=() st_saved=()
NAME_RE='^[A-Za-z0-9_.+@-]+$'
trusted() {  # trusted PATH: owned by root or by us, writable by no one else (what restore will register comes from it)
  local owner
  owner="$(stat -c %u -- "$1")"
  [[ "$owner" == 0 || "$owner" == "$(id -u)" ]] && ! (( 8#$(stat -c %a -- "$1") & 8#022 ))
}
load_state() {  # load_state: reads and checks the state file (absent: empty); damaged: one error line, exit 1
  st_status="" st_ours=() st_saved=()
  [[ -e "$state" || -L "$state" ]] || return 0
  local bad="" lines=() body sum i kind a b c d e f g h rest
  if [[ -L "$state" || ! -f "$state" ]]; then
    bad="not a regular file"
  elif ! trusted "$state" || ! trusted "$(dirname -- "$state")"; then
    bad="it or its folder is owned by another user or writable by others"
  elif (($(stat -c %s -- "$state") > 1048576)); then
    bad="larger than 1 MiB"
  elif (($(tr -cd '\000' <"$state" | wc -c))); then
    bad="it holds NUL bytes"
  else
    mapfile -t lines <"$state"
    body="$(head -n -1 -- "$state")"
    sum="$(printf '%s\n' "$body" | sha256sum | cut -d' ' -f1)"
    if ((${#lines[@]} < 2)) || [[ "${lines[0]}" != "$STATE_HEADER" ]]; then
      bad="no '$STATE_HEADER' header"
    elif [[ "${lines[-1]}" != "end"$'\t'"$sum" ]]; then
      bad="its checksum line does not match its content (truncated or edited)"
    fi
    for ((i = 1; i < ${#lines[@]} - 1 && ${#bad} == 0; i++)); do
      IFS=$'\t' read -r kind a b c d e f g h rest <<<"${lines[i]}"
      case "$kind" in
        status) [[ "$a" == disabled && -z "$b" ]] && st_status=disabled || bad="line $((i + 1)) is malformed" ;;
        ours)
          if [[ "$a" =~ $NAME_RE && "$b" == /* && -z "$c" ]]; then st_ours+=("$a"$'\t'"$b")
          else bad="line $((i + 1)) is malformed"; fi ;;
        saved)
          if [[ "$a" =~ $NAME_RE && "$a" != register && "$a" != status && "$b" =~ ^(enabled|disabled)$ \
                && "$c" =~ ^([POCF]+|-)$ && "$d" =~ ^[0-9]+$ && "$e" =~ ^([0-9a-f]{2})+$ \
                && ( "$f" == - || ( "$f" =~ ^([0-9a-f]{2})+$ && ${#f} == "${#e}" ) ) \
                && "$g" =~ ^([0-9a-f]{64}|-)$ && "$h$rest" == /* ]]; then
            st_saved+=("${lines[i]#saved$'\t'}")
          else bad="line $((i + 1)) is malformed"; fi ;;
        *) bad="line $((i + 1)) is malformed" ;;
      esac
    done
  fi
  [[ -z "$bad" ]] || die "the state file $state is damaged ($bad): nothing changed; see what it held, then remove it"
}

write_state() {  # write_state: writes st_* atomically (the state file and its folder only root's)
  local tmp body rec
  if ((${#st_ours[@]} + ${#st_saved[@]} == 0)) && [[ -z "$st_status" ]]; then rm -f -- "$state"; return; fi
  mkdir -p -- "$(dirname -- "$state")"
  trusted "$(dirname -- "$state")" || die "the state file's folder $(dirname -- "$state") is owned by another user" \
    "or writable by others: nothing changed"
  body="$STATE_HEADER"
  [[ -z "$st_status" ]] || body+=$'\n'"status"$'\t'"$st_status"
  for rec in ${st_ours[@]+"${st_ours[@]}"}; do body+=$'\n'"ours"$'\t'"$rec"; done
  for rec in ${st_saved[@]+"${st_saved[@]}"}; do body+=$'\n'"saved"$'\t'"$rec"; done
  tmp="$(mktemp "$state.XXXXXX")"
  chmod 600 -- "$tmp"
  printf '%s\nend\t%s\n' "$body" "$(printf '%s\n' "$body" | sha256sum | cut -d' ' -f1)" >"$tmp"
  mv -f -- "$tmp" "$state"
}

describe() {  # describe NAME: "NAME (enabled, interpreter X, flags F)" from the last read_entry
  printf '%s (%s, interpreter %s, flags %s)' "$1" "$e_state" "$e_interp" "${e_flags:-none}"
}

# --- binfmt_misc itself ---------------------------------------------------------------------------------------
changed=0
if [[ ! -e "$dir/register" ]]; then
  if $check || $restore; then
    echo "binfmt: $dir is not mounted: run scripts/binfmt.sh (as root) to mount it and register ${arches[*]}" >&2
    exit 1
  fi
  [[ "$dir" == "$DEFAULT_DIR" ]] || die "$dir has no register file: it is not a binfmt_misc mount"
  mount -t binfmt_misc binfmt_misc "$dir"
  echo "binfmt: mounted binfmt_misc on $dir"
  changed=1
fi
$check || load_state  # --check changes nothing and needs no state (root's)
global="$(head -n1 "$dir/status" 2>/dev/null || echo enabled)"

# --- --restore: remove what we registered, register again what we replaced, exactly ----------------------------
if $restore; then
  if ((${#st_ours[@]} + ${#st_saved[@]} == 0)) && [[ -z "$st_status" ]]; then
    echo "binfmt: nothing to restore ($state holds no replaced handler)"
    exit 0
  fi
  remove=()
  for rec in ${st_ours[@]+"${st_ours[@]}"}; do
    name="${rec%%$'\t'*}" interp="${rec#*$'\t'}"
    [[ -e "$dir/$name" ]] || continue
    read_entry "$name" || die "$dir/$name cannot be read as a binfmt_misc entry: nothing changed"
    if [[ "$e_interp" != "$interp" ]]; then  # a saved handler of that name back already: checked below
      for srec in ${st_saved[@]+"${st_saved[@]}"}; do [[ "${srec%%$'\t'*}" != "$name" ]] || continue 2; done
    fi
    [[ "$e_interp" == "$interp" ]] || die "$(describe "$name") is not the handler this script registered" \
      "(interpreter $interp): nothing changed; remove it (echo -1 > $dir/$name) to restore what it replaced"
    remove+=("$name")
  done
  lines=()
  for rec in ${st_saved[@]+"${st_saved[@]}"}; do
    IFS=$'\t' read -r name est eflags eoff emagic emask esha einterp <<<"$rec"
    [[ "$eflags" != - ]] || eflags=""
    [[ "$emask" != - ]] || emask=""
    if [[ -e "$dir/$name" ]] && [[ " ${remove[*]+${remove[*]}} " != *" $name "* ]]; then
      read_entry "$name" || die "$dir/$name cannot be read as a binfmt_misc entry: nothing changed"
      if [[ "$e_state $e_flags $e_offset $e_mask $e_interp" == "$est $eflags $eoff $emask $einterp" ]] \
         && [[ "$(masked "$e_magic" "$e_mask")" == "$(masked "$emagic" "$emask")" ]]; then
        echo "binfmt: $name is registered as it was saved already (an earlier --restore stopped half-way)"
        continue
      fi
      die "$(describe "$name") is neither a handler this script registered nor the saved $name: nothing" \
        "changed; remove it (echo -1 > $dir/$name) and run --restore again"
    fi
    if [[ "$eflags" == *F* && ! -e "$einterp" ]]; then
      die "the interpreter $einterp of the saved handler $name is gone, and with the F flag the kernel opens it:" \
        "nothing changed; put the file back, or remove $state to give the saved handler up"
    fi
    if [[ "$esha" != - ]] && [[ "$(file_sha "$einterp")" != "$esha" ]] && ! $force; then
      die "the interpreter $einterp of the saved handler $name is not the file it was when saved (sha256 $esha):" \
        "nothing changed; --force registers it anyway"
    fi
    line="$(register_line "$name" "$eoff" "$emagic" "$emask" "$einterp" "$eflags")" \
      || die "the saved handler $name cannot be written as one register line: nothing changed"
    lines+=("$name"$'\t'"$est"$'\t'"$line")
  done
  for name in ${remove[@]+"${remove[@]}"}; do
    kernel_write "$dir/$name" -1
    echo "binfmt: removed $name (registered by this script)"
  done
  for rec in ${lines[@]+"${lines[@]}"}; do
    name="${rec%%$'\t'*}" rest="${rec#*$'\t'}"
    est="${rest%%$'\t'*}" line="${rest#*$'\t'}"
    kernel_write "$dir/register" "$line"
    [[ "$est" == enabled ]] || kernel_write "$dir/$name" 0
    echo "binfmt: registered $name again as it was ($est)"
  done
  if [[ "$st_status" == disabled ]]; then
    kernel_write "$dir/status" 0
    echo "binfmt: disabled binfmt_misc again, as it was"
  fi
  st_status="" st_ours=() st_saved=()
  write_state
  echo "binfmt: restored; $state removed"
  exit 0
fi

# --- register ---------------------------------------------------------------------------------------------------
for arch in "${arches[@]}"; do
  [[ "$arch" =~ ^[a-z0-9_]+$ ]] || { echo "binfmt: error: $arch is not an architecture name like aarch64" >&2; exit 2; }
done
if [[ "$global" != enabled ]]; then
  if $check; then
    echo "binfmt: binfmt_misc is disabled as a whole ($dir/status): run scripts/binfmt.sh --force (as root)" >&2
    exit 1
  fi
  $force || die "binfmt_misc is disabled as a whole ($dir/status says $global), an administrator's choice:" \
    "nothing changed; --force enables it (--restore disables it again)"
fi

status=0
for arch in "${arches[@]}"; do
  name="qemu-$arch"
  conf="$conf_dir/qemu-$arch.conf"
  if [[ ! -r "$conf" ]]; then
    echo "binfmt: error: $conf is missing: apt-get install qemu-user-static (scripts/system-deps.sh installs it)" >&2
    exit 1
  fi
  # :name:type:offset:magic:mask:interpreter:flags, the first character the delimiter
  cline="$(grep -v '^#' "$conf" | grep -m1 . || true)"
  IFS="${cline:0:1}" read -r _ ctype coff cmagic cmask _ cflags <<<"${cline:1}"
  cmagic="$(unescape_hex "$cmagic")" && cmask="$(unescape_hex "$cmask")" && [[ "$ctype" == M && -n "$cmagic" ]] \
    && [[ -z "$cmask" || ${#cmask} == "${#cmagic}" ]] && [[ "${coff:=0}" =~ ^[0-9]+$ && "$cflags" =~ ^[POCF]*$ ]] \
    || die "$conf is not a magic (M) binfmt.d line as Debian's qemu-user-static writes it"
  want="$cflags"
  [[ "$want" == *F* ]] || want+=F  # F: the interpreter works inside containers too
  ours="$QEMU_DIR/qemu-$arch"
  [[ -x "$ours" && "$(cat "$QEMU_DIR/version" 2>/dev/null)" == "$QEMU_VERSION" ]] || ours=""

  # the existing handler: every entry named qemu-ARCH or matching ARCH's binaries, whatever its name
  others=() disabled=() why=() good=false named=false
  while IFS= read -r other; do
    read_entry "$other" || die "$dir/$other cannot be read as a binfmt_misc entry, so whether it handles $arch" \
      "binaries is unknown: nothing changed"
    if [[ "$other" != "$name" ]]; then
      if [[ "$e_type" != M ]] || ! overlaps "$e_offset" "$e_magic" "$e_mask" "$coff" "$cmagic" "$cmask"; then
        continue
      fi
      if [[ "$e_state" != enabled ]]; then disabled+=("$other"); continue; fi
      others+=("$other")
      why+=("$(describe "$other") also handles $arch binaries")
      continue
    fi
    if [[ "$e_state" != enabled ]]; then disabled+=("$other"); continue; fi
    named=true
    flags_ok=true
    for ((i = 0; i < ${#want}; i++)); do [[ "$e_flags" == *"${want:i:1}"* ]] || flags_ok=false; done
    if [[ "$e_type" != M || "$e_offset" != "$coff" || "$e_mask" != "$cmask" ]] \
         || [[ "$(masked "$e_magic" "$e_mask")" != "$(masked "$cmagic" "$cmask")" ]]; then
      why+=("$(describe "$other") has another magic/mask than $conf")
    elif ! $flags_ok; then
      why+=("$(describe "$other") lacks flags of $want (F: the interpreter works inside containers)")
    elif [[ -z "$ours" ]]; then
      why+=("$(describe "$other") cannot be compared with QEMU $QEMU_VERSION's qemu-$arch, not installed yet")
    elif ! same_bytes "$e_interp" "$ours"; then
      why+=("$(describe "$other"): its interpreter file is not QEMU $QEMU_VERSION's qemu-$arch (bytes compared)")
    else
      good=true
    fi
  done < <(entry_names)
  if $good && ((${#others[@]} == 0)); then
    read_entry "$name"
    echo "binfmt: $name already registered with the F flag ($e_interp: the bytes of QEMU $QEMU_VERSION's" \
      "qemu-$arch): unchanged"
    for other in ${disabled[@]+"${disabled[@]}"}; do
      echo "binfmt: $other (disabled, also for $arch binaries): left alone"
    done
    continue
  fi
  if ! $good; then
    for other in ${disabled[@]+"${disabled[@]}"}; do
      read_entry "$other"
      why+=("$(describe "$other") is disabled")
    done
    ((${#why[@]})) || why+=("no handler of $arch binaries is registered")
  fi
  if $check; then
    printf 'binfmt: %s\n' "${why[@]}" >&2
    echo "binfmt: $name is not the only handler of $arch binaries, QEMU $QEMU_VERSION with the F flag:" \
      "run scripts/binfmt.sh $arch (as root)" >&2
    status=1
    continue
  fi
  replace=(${others[@]+"${others[@]}"})
  if ! $good; then
    if ((${#disabled[@]})) && ! $force; then
      die "$(printf '%s, ' "${disabled[@]}")handling $arch binaries, is disabled, an administrator's choice:" \
        "nothing changed; --force replaces it (saved in $state; --restore puts it back)"
    fi
    replace+=(${disabled[@]+"${disabled[@]}"})
    ! $named || replace=("$name" "${replace[@]}")
    interpreter="$(interpreter_for "$arch")"
    line="$(register_line "$name" "$coff" "$cmagic" "$cmask" "$interpreter" "$want")" \
      || die "$interpreter cannot be written as a register line"
  fi
  # save each replaced entry first (not one this script registered), so that no failure below loses one
  for other in ${replace[@]+"${replace[@]}"}; do
    read_entry "$other"
    mine=false
    for rec in ${st_ours[@]+"${st_ours[@]}"}; do [[ "$rec" != "$other"$'\t'"$e_interp" ]] || mine=true; done
    $mine && continue
    [[ "$other" =~ $NAME_RE && "$e_type" == M && "$e_interp" == /* && "$e_interp" != *$'\t'* ]] \
      || die "$(describe "$other") cannot be saved to be restored: nothing changed"
    kept=()
    for rec in ${st_saved[@]+"${st_saved[@]}"}; do
      if [[ "${rec%%$'\t'*}" == "$other" ]]; then log "the earlier saved record of $other is superseded"
      else kept+=("$rec"); fi
    done
    [[ "$e_flags" != *F* || -e "$e_interp" ]] || log "$other's interpreter $e_interp is gone (the kernel holds" \
      "the file it opened): --restore cannot register it again until the file is back"
    rec="$other"$'\t'"$e_state"$'\t'"${e_flags:--}"$'\t'"$e_offset"$'\t'"$e_magic"$'\t'"${e_mask:--}"
    st_saved=(${kept[@]+"${kept[@]}"} "$rec"$'\t'"$(file_sha "$e_interp")"$'\t'"$e_interp")
  done
  if ! $good; then
    kept=()
    for rec in ${st_ours[@]+"${st_ours[@]}"}; do [[ "${rec%%$'\t'*}" == "$name" ]] || kept+=("$rec"); done
    st_ours=(${kept[@]+"${kept[@]}"} "$name"$'\t'"$interpreter")
  fi
  [[ "$global" == enabled ]] || st_status=disabled
  write_state
  if [[ "$global" != enabled ]]; then
    kernel_write "$dir/status" 1
    echo "binfmt: enabled binfmt_misc as a whole (--force; --restore disables it again)"
    global=enabled
  fi
  for w in "${why[@]}"; do echo "binfmt: replacing: $w"; done
  for other in ${replace[@]+"${replace[@]}"}; do
    kernel_write "$dir/$other" -1
    echo "binfmt: removed $other (saved in $state: scripts/binfmt.sh --restore puts it back)"
  done
  if $good; then
    echo "binfmt: kept $name, now the only handler of $arch binaries"
  else
    kernel_write "$dir/register" "$line"
    echo "binfmt: registered $name ($interpreter, flags $want)"
  fi
  changed=1
done
((changed)) || $check || echo "binfmt: nothing to change"
exit "$status"
