# shellcheck shell=bash
# Sourced (never run) by the scripts that take a tool from Debian trixie (modern-engine.sh: dockerd + buildx;
# cosign.sh: cosign): ONE way to fetch a package, verified end to end, without touching the host's apt sources or dpkg
# database. The InRelease is checked with gpgv against the Debian archive keys the project pins
# (compat/data/keys/debian-archive.asc), the Packages index against the sha256 the signed Release lists, each .deb
# against the sha256 the verified index lists.
#
# The caller sets `root` (the checkout) and `TOOLS` (where tools go, $IMAGEBUILD_TOOLS_DIR or .tools/) and defines
# `log` and `die` (its own message prefix) before sourcing this file.
# shellcheck disable=SC2154  # root, TOOLS: the caller's

MIRROR="${IMAGEBUILD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=trixie
KEYS="$root/src/imagebuild/compat/data/keys/debian-archive.asc"

need() { command -v "$1" >/dev/null 2>&1 || die "$1 is missing: run \`make install\` (scripts/system-deps.sh)"; }

fetch() {  # fetch URL FILE
    curl -fsSL --retry 3 -o "$2.part" "$1" || die "could not download $1"
    mv "$2.part" "$2"
}

verified_index() {  # prints the path of trixie's verified, decompressed main/binary-amd64 Packages file
    local cache="$TOOLS/cache" keyring inrelease clear want got
    mkdir -p "$cache"
    keyring="$cache/debian-archive.gpg"
    gpg --batch --yes --dearmor -o "$keyring" "$KEYS" 2>/dev/null || die "could not read the pinned keys $KEYS"
    inrelease="$cache/$SUITE-InRelease"
    clear="$cache/$SUITE-Release"
    fetch "$MIRROR/dists/$SUITE/InRelease" "$inrelease"
    # gpgv fails unless a key in the pinned keyring made a good signature; --output writes the signed text only
    gpgv --quiet --keyring "$keyring" --output "$clear" "$inrelease" 2>"$cache/gpgv.log" \
        || { cat "$cache/gpgv.log" >&2; die "$SUITE InRelease does not verify against $KEYS"; }
    grep -q "^Codename: $SUITE\$" "$clear" || die "the verified InRelease is not $SUITE's"
    # the SHA256 section lists " <sha256> <size> <path>"; take the line of the xz index
    want="$(awk '/^SHA256:/{s=1; next} /^[^ ]/{s=0} s && $3 == "main/binary-amd64/Packages.xz" {print $1}' "$clear")"
    [ -n "$want" ] || die "$SUITE Release lists no main/binary-amd64/Packages.xz"
    if [ ! -f "$cache/Packages.xz" ] || [ "$(sha256sum "$cache/Packages.xz" | cut -d' ' -f1)" != "$want" ]; then
        fetch "$MIRROR/dists/$SUITE/main/binary-amd64/Packages.xz" "$cache/Packages.xz"
    fi
    got="$(sha256sum "$cache/Packages.xz" | cut -d' ' -f1)"
    [ "$got" = "$want" ] || { rm -f "$cache/Packages.xz"; die "Packages.xz sha256 $got is not the $want the signed Release lists"; }
    xz -dc "$cache/Packages.xz" >"$cache/Packages"
    echo "$cache/Packages"
}

stanza_field() {  # stanza_field PACKAGES NAME FIELD: the field of package NAME's stanza
    awk -v RS= -v name="$2" -v field="$3" '
        $0 ~ ("(^|\n)Package: " name "\n") {
            n = split($0, lines, "\n")
            for (i = 1; i <= n; i++) if (index(lines[i], field ": ") == 1) { print substr(lines[i], length(field) + 3); exit }
        }' "$1"
}

fetch_deb() {  # fetch_deb PACKAGES NAME UPSTREAM_VERSION -> prints the path of the verified .deb
    local packages="$1" name="$2" upstream="$3" version filename sha got deb
    version="$(stanza_field "$packages" "$name" Version)"
    [ -n "$version" ] || die "$SUITE has no package $name"
    case "$version" in
        "$upstream"+* | "$upstream"-*) ;;
        *) die "$SUITE's $name is $version, not $upstream (this project runs $upstream; update the script)" ;;
    esac
    filename="$(stanza_field "$packages" "$name" Filename)"
    sha="$(stanza_field "$packages" "$name" SHA256)"
    deb="$TOOLS/cache/$(basename "$filename")"
    if [ ! -f "$deb" ] || [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$sha" ]; then
        log "downloading $name $version"
        fetch "$MIRROR/$filename" "$deb"
    fi
    got="$(sha256sum "$deb" | cut -d' ' -f1)"
    [ "$got" = "$sha" ] || { rm -f "$deb"; die "$(basename "$deb") sha256 $got is not the $sha $SUITE's index lists"; }
    echo "$deb"
}

