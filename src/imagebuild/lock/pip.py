"""Resolve one image's pip requirements to exact files, without installing anything.

`pip install --dry-run --report` for the image's Python and platforms (`--only-binary=:all:` is what pip demands
for another platform) downloads only the wheels' METADATA where the index serves it (PEP 658) and reports every
install, dependencies included, with the URL and sha256 of the file it chose. pip runs with no configuration file
and no PIP_* variable of this machine: exactly the index, extra indexes, find-links and CA files the build passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.errors import ImagebuildError
from imagebuild.files import certificate_blocks, sha256_file
from imagebuild.lock.model import PipPin, canonical_name
from imagebuild.secrets import redact

# pip >= 23 does not widen `--platform manylinux_2_36_x86_64` to older manylinux tags: list them all, as pip's own
# tags for a glibc 2.36 host would (plus the legacy aliases and plain linux_* wheels, which a wheelhouse may hold).
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platform_tags(glibc: str, arch: str = "x86_64") -> tuple[str, ...]:
    major, minor = (int(x) for x in glibc.split(".")[:2])
    tags = []
    for m in range(minor, 4, -1):
        tags.append(f"manylinux_{major}_{m}_{arch}")
        if m in _LEGACY:
            tags.append(f"{_LEGACY[m]}_{arch}")
    return (*tags, f"linux_{arch}")


@dataclass(frozen=True)
class PipSource:
    """Where the build's pip stage looks: what render put into PIP_INDEX_URL / PIP_EXTRA_INDEX_URL and the
    wheelhouse folder (`--find-links` in the build)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    ca_files: tuple[str, ...] = ()  # extra CA files the image trusts (added to this machine's bundle)


@dataclass
class PipResolver:
    """Runs pip; results cached per (requirements, constraints, target): bases shared by variants resolve once."""

    runner: object = subprocess.run
    timeout: float = 900.0
    seconds: float = 0.0  # time spent in pip (the lock command reports it)
    calls: int = 0
    _cache: dict[tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...], PipSource], list[PipPin]] = field(default_factory=dict)

    def resolve(self, requirements: list[str], *, python: str, platforms: tuple[str, ...], source: PipSource,
                constraints: list[str] = (), what: str = "") -> list[PipPin]:  # type: ignore[assignment]
        key = (tuple(requirements), tuple(constraints), python, platforms, source)
        if key not in self._cache:
            self._cache[key] = self._resolve(requirements, python, platforms, source, list(constraints), what)
        return self._cache[key]

    def _resolve(self, requirements: list[str], python: str, platforms: tuple[str, ...], source: PipSource,
                 constraints: list[str], what: str) -> list[PipPin]:
        import time

        with tempfile.TemporaryDirectory(prefix="imagebuild-lock-") as tmp:
            report = Path(tmp) / "report.json"
            (Path(tmp) / "target").mkdir()
            cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--disable-pip-version-check", "--no-input", "--report", str(report), "--target",
                   str(Path(tmp) / "target"), "--only-binary=:all:", "--python-version", python,
                   "--implementation", "cp"]
            for tag in platforms:
                cmd += ["--platform", tag]
            if source.index_url:
                cmd += ["--index-url", source.index_url]
            for url in source.extra_index_urls:
                cmd += ["--extra-index-url", url]
            for folder in source.find_links:
                cmd += ["--find-links", folder]
            cert = _ca_bundle(source.ca_files, Path(tmp))
            if cert:
                cmd += ["--cert", str(cert)]
            if constraints:
                cfile = Path(tmp) / "constraints.txt"
                cfile.write_text("\n".join(constraints) + "\n")
                cmd += ["--constraint", str(cfile)]
            cmd += list(requirements)
            env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
            env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf of this machine (its indexes are not the build's)
            start = time.monotonic()
            proc = self.runner(cmd, capture_output=True, text=True, timeout=self.timeout, env=env)  # type: ignore[operator]
            self.seconds += time.monotonic() - start
            self.calls += 1
            if proc.returncode != 0 or not report.is_file():
                if constraints and "ResolutionImpossible" in (proc.stderr or "") + (proc.stdout or ""):
                    # the flavor needs another version of a parent's package: resolve it on its own (pip upgrades
                    # that package in the flavor's stage, as an unlocked build would)
                    return self._resolve(requirements, python, platforms, source, [], what)
                lines = [ln for ln in (proc.stderr or proc.stdout or "").strip().splitlines() if ln.strip()]
                tail = " / ".join(redact(ln.strip()) for ln in lines[-3:])
                raise ImagebuildError(f"pip could not resolve {what or ' '.join(requirements)} for Python {python} "
                                      f"({platforms[0]}): {tail or 'no output'}")
            return pins_from_report(json.loads(report.read_text(encoding="utf-8")))


def _ca_bundle(extra: tuple[str, ...], tmp: Path) -> Path | None:
    """This machine's trust (PIP_CERT, REQUESTS_CA_BUNDLE, SSL_CERT_FILE or the system bundle) plus the image's
    extra CA files: pip reaches the index from here as the build does from inside the image."""
    base = next((os.environ[k] for k in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
                 if os.environ.get(k) and Path(os.environ[k]).is_file()), None)
    if base is None and Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        base = "/etc/ssl/certs/ca-certificates.crt"
    if not extra:
        return Path(base) if base else None
    bundle = tmp / "ca-bundle.pem"
    parts = [Path(base).read_bytes()] if base else []
    parts += [certificate_blocks(Path(p)) for p in extra]
    bundle.write_bytes(b"\n".join(parts))
    return bundle


def pins_from_report(report: dict[str, Any]) -> list[PipPin]:
    """Every install of a `pip install --report` document as a pin (name, version, sha256, file name)."""
    pins = []
    for item in report.get("install", []):
        meta = item.get("metadata") or {}
        info = item.get("download_info") or {}
        url = str(info.get("url") or "")
        parsed = urllib.parse.urlsplit(url)
        file = urllib.parse.unquote(parsed.path.rsplit("/", 1)[-1])
        sha = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        if parsed.scheme == "file":  # a wheelhouse file: the hash of the bytes the build will read
            sha = sha256_file(Path(urllib.parse.unquote(parsed.path)))
        if not sha:
            raise ImagebuildError(f"pip's report gives no sha256 for {meta.get('name')} ({redact(url)})")
        pins.append(PipPin(name=canonical_name(str(meta["name"])), version=str(meta["version"]), sha256=sha,
                           file=file))
    return sorted(pins, key=lambda p: p.name)
