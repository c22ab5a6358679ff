"""apt package versions from the archive's own indexes, read over HTTP from this machine (no container needed).

For each source line of the base (`deb URL SUITE COMPONENTS`, the same lines the bootstrap uses: suite, -updates,
-security) the lock reads `dists/SUITE/InRelease` (its `Date:` is the mirror state) and
`dists/SUITE/COMPONENT/binary-ARCH/Packages.xz`; a package's version is the highest one any of them offers, which
is what `apt-get install` picks with the default pin priorities. Signatures are not checked here: apt checks them
in the build, where `name=version` only selects among packages the pinned archive keys vouch for.
"""

from __future__ import annotations

import base64
import email.utils
import gzip
import lzma
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from imagebuild.errors import ImagebuildError
from imagebuild.secrets import redact, split_userinfo

ARCH = "amd64"  # the templates build x86_64 images (CUDA repository arch x86_64, manylinux *_x86_64 wheels)


# -- Debian version ordering (deb-version(7)) ------------------------------------------------------------------------
def _order(c: str) -> int:
    if c == "~":
        return -1
    if c.isdigit():
        return 0
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _cmp_part(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) and not a[i].isdigit() else 0
            bc = _order(b[j]) if j < len(b) and not b[j].isdigit() else 0
            if ac != bc:
                return -1 if ac < bc else 1
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not diff:
                diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if diff:
            return -1 if diff < 0 else 1
    return 0


def _split(v: str) -> tuple[int, str, str]:
    epoch, _, rest = v.partition(":") if ":" in v else ("0", "", v)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
    return int(epoch or 0), upstream, revision


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1, as `dpkg --compare-versions` orders Debian versions."""
    ea, ua, ra = _split(a)
    eb, ub, rb = _split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _cmp_part(ua, ub) or _cmp_part(ra, rb)


# -- indexes ---------------------------------------------------------------------------------------------------------
def _fetch(url: str, timeout: float) -> bytes:
    clean, user, password = split_userinfo(url)
    req = urllib.request.Request(clean)
    if user or password:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (the matrix's own mirror)
        body: bytes = resp.read()  # urlopen's response is Any in typeshed
        return body


def parse_packages(text: str) -> dict[str, str]:
    """A Packages index -> package -> highest version in it."""
    best: dict[str, str] = {}
    name = version = None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if name and version and (name not in best or compare_versions(version, best[name]) > 0):
                best[name] = version
            name = version = None
        elif line.startswith("Package:"):
            name = line[8:].strip()
        elif line.startswith("Version:"):
            version = line[8:].strip()
    return best


@dataclass
class AptIndex:
    """Versions offered by a set of source lines; every file is read once per process."""

    timeout: float = 60.0
    fetch: object = _fetch
    _files: dict[str, bytes] = field(default_factory=dict)

    def _get(self, url: str) -> bytes:
        if url not in self._files:
            self._files[url] = self.fetch(url, self.timeout)  # type: ignore[operator]
        return self._files[url]

    def _packages(self, base: str, suite: str, component: str) -> dict[str, str]:
        errors = []
        for name, unpack in (("Packages.xz", lzma.decompress), ("Packages.gz", gzip.decompress),
                             ("Packages", lambda b: b)):
            url = f"{base}/dists/{suite}/{component}/binary-{ARCH}/{name}"
            try:
                return parse_packages(unpack(self._get(url)).decode("utf-8", "replace"))
            except Exception as exc:  # try the next compression; report all if none answers
                errors.append(f"{name}: {exc}")
        raise ImagebuildError(f"apt index {redact(base)} {suite}/{component}: cannot read it ({'; '.join(errors)})")

    def mirror_state(self, lines: list[str]) -> dict[str, str]:
        """`<url> <suite>` -> the Date of that suite's InRelease (what the mirror served when the lock was made)."""
        out = {}
        for line in lines:
            _, url, suite = line.split()[:3]
            base = url.rstrip("/")
            try:
                head = self._get(f"{base}/dists/{suite}/InRelease")[:16384].decode("utf-8", "replace")
            except Exception as exc:
                raise ImagebuildError(f"apt mirror {redact(base)} {suite}: InRelease unreadable ({exc})") from None
            date = next((ln[5:].strip() for ln in head.splitlines() if ln.startswith("Date:")), None)
            if date is None:
                raise ImagebuildError(f"apt mirror {redact(base)} {suite}: InRelease has no Date")
            stamp = email.utils.parsedate_to_datetime(date).strftime("%Y-%m-%dT%H:%M:%SZ")
            out[f"{redact(base)} {suite}"] = stamp
        return out

    def versions(self, lines: list[str], packages: list[str], what: str = "") -> dict[str, str]:
        """package -> the highest version the source lines offer; an unknown package is an error naming it."""
        offered: dict[str, str] = {}
        for line in lines:
            _, url, suite, *components = line.split()
            for component in components:
                for name, version in self._packages(url.rstrip("/"), suite, component).items():
                    if name not in offered or compare_versions(version, offered[name]) > 0:
                        offered[name] = version
        missing = [p for p in packages if p not in offered]
        if missing:
            suites = ", ".join(sorted({ln.split()[2] for ln in lines}))
            raise ImagebuildError(f"{what + ': ' if what else ''}apt package(s) {', '.join(missing)} not in the "
                                  f"Packages indexes of {suites} ({ARCH}); a virtual or misspelled name?")
        return {p: offered[p] for p in sorted(packages)}
