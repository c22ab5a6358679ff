"""The signed security index of a Debian or Ubuntu release: `dists/<codename>-security/InRelease` verified with the
archive keys the bootstrap pins (compat/keys.py: a keyring of exactly those fingerprints, gpgv), then each
component's `binary-<arch>/Packages.xz` (or .gz) checked against the sha256 and size the verified InRelease names.

Debian: http://deb.debian.org/debian-security, suite <codename>-security, component main. Ubuntu: the release's
mirror (archive.ubuntu.com; arm64 on ports.ubuntu.com), suite <codename>-security, main + universe. An index is read
once per run (SecurityIndexes keeps it by suite and architecture); the Packages files are kept in a cache folder by
their sha256 ($IMAGEBUILD_CACHE_DIR/security-index/, else ~/.cache/imagebuild/...), so a later run fetches only the
InRelease (a few KB) while the suite has not moved. An InRelease past its Valid-Until is not used (a replayed old
index would hide every newer fix).
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import lzma
import os
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from imagebuild.compat import keys
from imagebuild.compat.tables import Tables
from imagebuild.errors import ImagebuildError
from imagebuild.lock.apt import compare_versions
from imagebuild.secrets import redact

Fetch = Callable[[str, float], bytes]
MAX_INRELEASE = 1 << 20
MAX_PACKAGES = 256 << 20  # an uncompressed Packages of a security suite is a few MB; main of a release ~60 MB


class IndexUnavailable(ImagebuildError):
    """The security index could not be read or trusted: the source is "not checked", with this as the reason."""


@dataclass(frozen=True)
class Suite:
    """Where the security suite of one OS release and architecture is."""

    os_id: str  # compat row: debian12, ubuntu24.04
    family: str
    codename: str
    arch: str  # Debian architecture: amd64, arm64
    base: str  # archive URL, e.g. http://deb.debian.org/debian-security
    suite: str  # bookworm-security
    components: tuple[str, ...]
    keyring: str | None
    archive_keys: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.family}-security {self.suite}"


@dataclass(frozen=True)
class Offered:
    name: str
    version: str
    source: str
    source_version: str


@dataclass
class SecurityIndex:
    suite: Suite
    date: str  # the InRelease Date:, RFC 3339
    inrelease_sha256: str
    files: tuple[str, ...]  # the Packages files read (URLs)
    binaries: dict[str, Offered] = field(default_factory=dict)  # binary name -> highest version offered
    sources: dict[str, str] = field(default_factory=dict)  # source name -> highest source version offered
    hashes: tuple[str, ...] = ()  # the sha256 of each file in `files` (its name in the by-hash cache)


def suite_for(tables: Tables, os_id: str, codename: str, arch: str) -> Suite | None:
    """The security suite of an image's OS (os-release ID + codename), None for an OS compat does not know."""
    for row in tables.os.values():
        if row.family == os_id and row.codename == codename:
            if row.family == "debian":
                base = row.mirror.rstrip("/") + "-security"
            else:
                base = (row.ports_mirror if arch not in ("amd64", "i386") and row.ports_mirror else row.mirror)
            return Suite(row.id, row.family, row.codename, arch, base.rstrip("/"), f"{row.codename}-security",
                         tuple(row.components), row.keyring, tuple(row.archive_keys))
    return None


def urllib_fetch(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout) as resp:  # noqa: S310 (archive URL)
        body: bytes = resp.read(MAX_PACKAGES + 1)
        return body


def cache_root(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    root = env.get("IMAGEBUILD_CACHE_DIR") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                                            "imagebuild")
    return Path(root) / "security-index"


def _release_fields(text: str) -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
    """InRelease's fields and its SHA256 list (path -> (sha256, size))."""
    fields: dict[str, str] = {}
    sums: dict[str, tuple[str, int]] = {}
    current = ""
    for line in text.splitlines():
        if line[:1] in (" ", "\t"):
            if current == "SHA256":
                parts = line.split()
                if len(parts) == 3 and parts[1].isdigit():
                    sums[parts[2]] = (parts[0].lower(), int(parts[1]))
            continue
        name, sep, value = line.partition(":")
        if sep:
            current = name.strip()
            fields[current] = value.strip()
    return fields, sums


def _rfc3339(value: str) -> datetime | None:
    try:
        return email.utils.parsedate_to_datetime(value).astimezone(timezone.utc)
    except (TypeError, ValueError):
        return None


def parse_packages(text: str, into: SecurityIndex, arch: str) -> int:
    """Add a Packages index's stanzas (this arch and all) to `into`; the number of stanzas read."""
    count = 0
    for stanza in text.split("\n\n"):
        f: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                k, _, v = line.partition(":")
                f[k] = v.strip()
        name, version = f.get("Package"), f.get("Version")
        if not name or not version or f.get("Architecture", arch) not in (arch, "all"):
            continue
        count += 1
        src, _, src_ver = f.get("Source", name).partition(" ")
        src_ver = src_ver.strip("() ") or version
        old = into.binaries.get(name)
        if old is None or compare_versions(version, old.version) > 0:
            into.binaries[name] = Offered(name, version, src, src_ver)
        if src not in into.sources or compare_versions(src_ver, into.sources[src]) > 0:
            into.sources[src] = src_ver
    return count


class SecurityIndexes:
    """The security indexes of one run: each suite and architecture read once (fetch injected for tests)."""

    def __init__(self, tables: Tables, fetch: Fetch = urllib_fetch, cache: Path | None = None,
                 timeout: float = 60.0, now: datetime | None = None) -> None:
        self.tables, self.fetch, self.timeout, self.now = tables, fetch, timeout, now
        self.cache = cache if cache is not None else cache_root()
        self._got: dict[tuple[str, str], SecurityIndex | IndexUnavailable] = {}

    def get(self, suite: Suite) -> SecurityIndex:
        key = (suite.base + " " + suite.suite, suite.arch)
        if key not in self._got:
            try:
                self._got[key] = self._read(suite)
            except IndexUnavailable as exc:
                self._got[key] = exc
        got = self._got[key]
        if isinstance(got, IndexUnavailable):
            raise got
        return got

    def _get(self, url: str) -> bytes:
        try:
            return self.fetch(url, self.timeout)
        except Exception as exc:  # any transport failure: the source is not checked, with why
            raise IndexUnavailable(f"{redact(url)}: not reachable ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None

    def _read(self, suite: Suite) -> SecurityIndex:
        url = f"{suite.base}/dists/{suite.suite}/InRelease"
        signed = self._get(url)
        if len(signed) > MAX_INRELEASE:
            raise IndexUnavailable(f"{redact(url)}: over {MAX_INRELEASE} bytes, not an InRelease")
        with tempfile.TemporaryDirectory(prefix="imagebuild-audit-") as tmp:
            home = Path(tmp) / "gnupg"
            home.mkdir(mode=0o700)
            try:
                keyring = keys.export_pinned(suite.os_id, suite.keyring, suite.archive_keys, home,
                                             Path(tmp) / "pinned.gpg", what="audited")
                text = keys.verify_clearsigned(signed, keyring, suite.archive_keys, redact(url)).decode("utf-8", "replace")
            except keys.ArchiveKeyError as exc:
                raise IndexUnavailable(str(exc)) from None
        fields, sums = _release_fields(text)
        date = _rfc3339(fields.get("Date", ""))
        if date is None:
            raise IndexUnavailable(f"{redact(url)}: no readable Date:")
        until = _rfc3339(fields.get("Valid-Until", ""))
        now = self.now or datetime.now(timezone.utc)
        if until is not None and until < now:
            raise IndexUnavailable(f"{redact(url)}: expired (Valid-Until {until:%Y-%m-%dT%H:%M:%SZ}): a stale or "
                                   "replayed index would hide newer fixes")
        index = SecurityIndex(suite, date.strftime("%Y-%m-%dT%H:%M:%SZ"), hashlib.sha256(signed).hexdigest(), ())
        read = [self._packages(suite, component, sums, index) for component in suite.components]
        index.files = tuple(url for url, _ in read)
        index.hashes = tuple(sha for _, sha in read)
        return index

    def _packages(self, suite: Suite, component: str, sums: dict[str, tuple[str, int]], index: SecurityIndex
                  ) -> tuple[str, str]:
        for name, unpack in (("Packages.xz", lzma.decompress), ("Packages.gz", gzip.decompress)):
            path = f"{component}/binary-{suite.arch}/{name}"
            if path not in sums:
                continue
            sha, size = sums[path]
            url = f"{suite.base}/dists/{suite.suite}/{path}"
            data = self._cached(sha)
            if data is None:
                data = self._get(url)
                if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
                    raise IndexUnavailable(f"{redact(url)}: sha256/size differ from the signed InRelease's "
                                           f"({size} bytes, {sha[:16]}…)")
                self._keep(sha, data)
            try:
                raw = unpack(data)
            except (lzma.LZMAError, OSError, EOFError) as exc:
                raise IndexUnavailable(f"{redact(url)}: cannot decompress ({exc})") from None
            parse_packages(raw[:MAX_PACKAGES].decode("utf-8", "replace"), index, suite.arch)
            return url, sha
        raise IndexUnavailable(f"{redact(suite.base)} {suite.suite}: the signed InRelease lists no "
                               f"{component}/binary-{suite.arch}/Packages.xz or .gz")

    def _cached(self, sha: str) -> bytes | None:
        path = self.cache / "by-hash" / sha
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == sha else None

    def _keep(self, sha: str, data: bytes) -> None:
        folder = self.cache / "by-hash"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{sha}.{os.getpid()}"
            tmp.write_bytes(data)
            os.replace(tmp, folder / sha)
        except OSError:
            pass  # a cache only: the next run fetches again
