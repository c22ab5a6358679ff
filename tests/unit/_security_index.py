"""The REAL bookworm-security index for the audit tests, fetched once into a cache folder.

The signed InRelease is fetched from deb.debian.org and a copy kept ($IMAGEBUILD_CACHE_DIR/security-index/test-suites/,
else ~/.cache/imagebuild/...); its Packages.xz lands in the audit's own by-hash cache. Offline, the kept copies are
used (checked against the pinned keys like a fresh one; the clock is set to the copy's date, so its Valid-Until
holds). Neither reachable nor kept: the test skips saying so, or fails under IMAGEBUILD_REQUIRE_ENGINE=1."""

from __future__ import annotations

import lzma
import os
from datetime import datetime, timezone

import pytest

from imagebuild.audit.debian import SecurityIndex, SecurityIndexes, cache_root, suite_for, urllib_fetch
from imagebuild.compat import load as load_tables

_INDEXES: dict[str, SecurityIndex] = {}


def unavailable(why: str) -> None:
    if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
        pytest.fail(why)
    pytest.skip(why)


def real_indexes(codename: str = "bookworm") -> tuple[SecurityIndexes, SecurityIndex]:
    """The run's SecurityIndexes (the real cache, a fetch that keeps the InRelease) and the real index."""
    tables = load_tables()
    suite = suite_for(tables, "debian", codename, "amd64")
    assert suite is not None
    kept = cache_root() / "test-suites" / f"{suite.suite}.InRelease"

    def fetch(url: str, timeout: float) -> bytes:
        if url.endswith("/InRelease"):
            try:
                data = urllib_fetch(url, 20.0)
            except OSError:
                if kept.is_file():
                    return kept.read_bytes()
                raise
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(data)
            return data
        return urllib_fetch(url, 60.0)

    now = None
    if kept.is_file():  # a kept copy may be older than a week: judge its Valid-Until on its own date
        now = datetime.fromtimestamp(kept.stat().st_mtime, timezone.utc)
    indexes = SecurityIndexes(tables, fetch=fetch, now=now)
    if codename not in _INDEXES:
        from imagebuild.audit.debian import IndexUnavailable

        try:
            _INDEXES[codename] = indexes.get(suite)
        except IndexUnavailable as exc:
            unavailable(f"the real {suite.suite} index is neither reachable nor cached: {exc}")
    return indexes, _INDEXES[codename]


def stanzas_of(index_text: str, names: set[str]) -> dict[str, str]:
    out = {}
    for stanza in index_text.split("\n\n"):
        first = stanza.split("\n", 1)[0]
        if first.startswith("Package: ") and first[9:] in names and "Architecture: amd64" in stanza:
            out[first[9:]] = stanza
    return out


def status_file(stanzas: dict[str, str], versions: dict[str, str]) -> str:
    """A dpkg status file from real Packages stanzas (archive-only fields dropped, Status added)."""
    keep = ("Package", "Source", "Version", "Architecture", "Maintainer", "Installed-Size", "Depends", "Description",
            "Multi-Arch", "Homepage", "Section", "Priority")
    out = []
    for name, stanza in stanzas.items():
        lines = [ln for ln in stanza.splitlines() if ln.split(":", 1)[0] in keep or ln.startswith(" ")]
        lines = [f"Version: {versions[name]}" if ln.startswith("Version:") and name in versions else ln for ln in lines]
        out.append("\n".join([lines[0], "Status: install ok installed", *lines[1:]]))
    return "\n\n".join(out) + "\n"


def packages_text(index: SecurityIndex, indexes: SecurityIndexes) -> str:
    """The real Packages index the audit read (from its by-hash cache, by the sha256 the signed InRelease named)."""
    assert index.files[0].endswith("main/binary-amd64/Packages.xz")
    return lzma.decompress((indexes.cache / "by-hash" / index.hashes[0]).read_bytes()).decode("utf-8", "replace")


def tar_of(files: dict[str, str]) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


OLD_SSL = "3.0.11-1~deb12u2"  # a real bookworm (12.4) libssl3, long replaced by the security suite


def debian12_fs(indexes: SecurityIndexes, index: SecurityIndex, stale: bool) -> bytes:
    """An image's files for the fake engine: a Debian 12 os-release and a dpkg database of the index's real libssl3
    and openssl stanzas, libssl3 at OLD_SSL where `stale`."""
    stanzas = stanzas_of(packages_text(index, indexes), {"libssl3", "openssl"})
    return tar_of({"etc/os-release": 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n',
                   "var/lib/dpkg/status": status_file(stanzas, {"libssl3": OLD_SSL} if stale else {})})
