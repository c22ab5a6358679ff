"""Installed Python distributions, read from their metadata files (never by running the image's python).

Every `*.dist-info/METADATA` (wheels, pip) and `*.egg-info/PKG-INFO` or `*.egg-info` file (setuptools, Debian's
python3-* packages) under any `site-packages` or `dist-packages` directory counts: venvs, the system python,
/usr/local, conda prefixes alike.
"""

from __future__ import annotations

import re
from email.parser import HeaderParser

from imagebuild.inventory.model import PyDist

_META = re.compile(
    r"^(?P<location>(?:.*/)?(?:site|dist)-packages)/"
    r"(?P<dir>[^/]+\.dist-info/METADATA|[^/]+\.egg-info/PKG-INFO|[^/]+\.egg-info)$"
)
_LICENSE_CLASSIFIER = "License :: "
_MAX_LICENSE_NAME = 120  # a License: longer than this (or multi-line) is the license text itself, not its name


def wanted(path: str) -> bool:
    """Whether a file (path relative to /) is a distribution's metadata."""
    return _META.match(path) is not None


def parse_metadata(text: str, location: str) -> PyDist | None:
    """One distribution from its METADATA / PKG-INFO text (core metadata: email-header format); None without a
    Name or Version."""
    msg = HeaderParser().parsestr(text, headersonly=True)
    name = (msg.get("Name") or "").strip()
    version = (msg.get("Version") or "").strip()
    if not name or not version:
        return None
    license_text = (msg.get("License") or "").strip()
    if "\n" in license_text or len(license_text) > _MAX_LICENSE_NAME or license_text.upper() == "UNKNOWN":
        license_text = ""
    classifiers = tuple(sorted({
        c.strip().rsplit(" :: ", 1)[-1]
        for c in msg.get_all("Classifier") or []
        if c.strip().startswith(_LICENSE_CLASSIFIER) and c.count("::") >= 2
    }))
    homepage = (msg.get("Home-page") or "").strip()
    if not homepage or homepage.upper() == "UNKNOWN":
        homepage = ""
        for url in msg.get_all("Project-URL") or []:
            label, _, value = url.partition(",")
            if label.strip().lower().replace("-", "").replace(" ", "") in ("homepage", "home", "source"):
                homepage = value.strip()
                break
    return PyDist(
        name=name,
        version=version,
        location="/" + location,
        license_expression=(msg.get("License-Expression") or "").strip(),
        license=license_text,
        license_classifiers=classifiers,
        summary=(msg.get("Summary") or "").strip(),
        homepage=homepage,
    )


def read_distributions(files: dict[str, bytes]) -> list[PyDist]:
    """Every distribution among the collected files, sorted by (normalized name, version, location)."""
    found: dict[tuple[str, str, str], PyDist] = {}
    for path in sorted(files):
        m = _META.match(path)
        if not m:
            continue
        dist = parse_metadata(files[path].decode("utf-8", "replace"), m.group("location"))
        if dist is not None:
            found.setdefault((dist.key, dist.version, dist.location), dist)
    return [found[k] for k in sorted(found)]
