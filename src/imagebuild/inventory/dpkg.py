"""dpkg's package database, parsed from its files (never by running dpkg in the image).

`/var/lib/dpkg/status` is a list of deb822 paragraphs; distroless-style images have no status file but one
paragraph file per package in `/var/lib/dpkg/status.d/` (without a Status: field: everything there is installed).
Licenses come from machine-readable `/usr/share/doc/<package>/copyright` files (DEP-5) when the image kept them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from imagebuild.inventory.model import DebPackage

STATUS = "var/lib/dpkg/status"
STATUS_D = "var/lib/dpkg/status.d/"
DOC_COPYRIGHT = re.compile(r"^usr/share/doc/([^/]+)/copyright$")
DEP5_FORMAT = re.compile(r"^Format:\s*\S*copyright-format", re.IGNORECASE | re.MULTILINE)


def paragraphs(text: str) -> list[dict[str, str]]:
    """deb822 paragraphs: field names as written; continuation lines joined with newlines (" ." → empty line)."""
    out: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                out.append(current)
            current, last = {}, ""
            continue
        if line.startswith("#"):
            continue
        if line[0] in " \t":
            if last:
                cont = line.strip()
                current[last] += "\n" + ("" if cont == "." else cont)
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue  # not a field: tolerate rather than fail the whole database
        last = name.strip()
        current[last] = value.strip()
    if current:
        out.append(current)
    return out


def _installed(fields: dict[str, str]) -> bool:
    status = fields.get("Status")
    if status is None:
        return True  # status.d entries carry no Status
    words = status.split()
    return len(words) == 3 and words[2] in ("installed", "half-configured", "triggers-awaited", "triggers-pending")


def parse_status(text: str, licenses: dict[str, tuple[str, ...]] | None = None) -> list[DebPackage]:
    """Installed packages of one status file (or status.d entry); packages removed with their config
    (`deinstall ok config-files`) are not installed and are left out."""
    licenses = licenses or {}
    pkgs: list[DebPackage] = []
    for fields in paragraphs(text):
        name = fields.get("Package", "")
        version = fields.get("Version", "")
        if not name or not version or not _installed(fields):
            continue
        source, _, rest = fields.get("Source", "").partition(" ")
        source_version = rest.strip().strip("()") if rest else ""
        pkgs.append(DebPackage(
            name=name,
            version=version,
            architecture=fields.get("Architecture", ""),
            source=source,
            source_version=source_version,
            maintainer=fields.get("Maintainer", ""),
            summary=fields.get("Description", "").split("\n", 1)[0],
            homepage=fields.get("Homepage", ""),
            licenses=licenses.get(name, ()),
        ))
    return pkgs


def copyright_licenses(text: str) -> tuple[str, ...]:
    """Distinct License: short names of a DEP-5 copyright file (sorted); () when it is free-form text."""
    if not DEP5_FORMAT.search(text):
        return ()
    names: set[str] = set()
    for fields in paragraphs(text):
        value = fields.get("License", "").split("\n", 1)[0].strip()
        if value:
            names.add(value)
    return tuple(sorted(names))


def read_database(files: dict[str, bytes]) -> list[DebPackage]:
    """Packages from the collected files (paths relative to /): status plus every status.d entry, deduplicated on
    (name, architecture), sorted."""
    licenses: dict[str, tuple[str, ...]] = {}
    for path, data in files.items():
        m = DOC_COPYRIGHT.match(path)
        if m:
            found = copyright_licenses(data.decode("utf-8", "replace"))
            if found:
                licenses[m.group(1)] = found
    texts: Iterable[bytes] = [files[p] for p in sorted(files) if p == STATUS or _is_status_d(p)]
    by_key: dict[tuple[str, str], DebPackage] = {}
    for data in texts:
        for pkg in parse_status(data.decode("utf-8", "replace"), licenses):
            by_key.setdefault((pkg.name, pkg.architecture), pkg)
    return [by_key[k] for k in sorted(by_key)]


def _is_status_d(path: str) -> bool:
    # newer distroless images put <pkg>.md5sums beside each entry
    return path.startswith(STATUS_D) and "/" not in path[len(STATUS_D):] and not path.endswith(".md5sums")


def wanted(path: str) -> bool:
    """Whether a file (path relative to /) belongs to the dpkg database or a package's copyright."""
    return path == STATUS or _is_status_d(path) or DOC_COPYRIGHT.match(path) is not None
