"""What an image holds, as read from its files and config: the table `sbom` writes and `diff` compares.

Plain frozen dataclasses, no engine: an Inventory can come from the local engine (local.py), a registry (from_registry.py)
or a test fixture, and everything downstream (cyclonedx.py, diff.py) is a pure function of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    architecture: str = ""
    source: str = ""  # source package name (Source: without its "(version)")
    source_version: str = ""  # from "Source: name (version)" when it differs from Version
    maintainer: str = ""
    summary: str = ""  # first line of Description
    homepage: str = ""
    licenses: tuple[str, ...] = ()  # License: short names from a machine-readable /usr/share/doc/<pkg>/copyright


@dataclass(frozen=True)
class PyDist:
    name: str  # as the distribution spells it (METADATA Name:)
    version: str
    location: str  # the site-packages/dist-packages directory it is installed in, e.g. /opt/venv/lib/python3.11/...
    license_expression: str = ""  # License-Expression: (metadata 2.4), an SPDX expression
    license: str = ""  # License: when it is a short name, not a whole license text
    license_classifiers: tuple[str, ...] = ()  # "MIT License" from "License :: OSI Approved :: MIT License"
    summary: str = ""
    homepage: str = ""

    @property
    def key(self) -> str:
        return normalize_name(self.name)


@dataclass(frozen=True)
class Bundled:
    """Software an image carries outside dpkg and Python (code-server and its node, issue 43), read from the pin file
    imagebuild writes beside it (/etc/imagebuild/<name>.json)."""

    name: str
    version: str
    purl: str  # pkg:npm/code-server@4.139.1
    location: str  # where it is installed, e.g. /opt/code-server
    licenses: tuple[str, ...] = ()  # SPDX ids
    integrity: str = ""  # the npm registry's dist.integrity (sha512-<base64>) it was checked against, when known


@dataclass(frozen=True)
class Layer:
    diff_id: str  # sha256 of the uncompressed layer tar (config rootfs.diff_ids): the same locally and remotely
    size: int | None  # bytes; None when not known (see Inventory.size_kind)
    created_by: str = ""  # the history line that made it


@dataclass(frozen=True)
class OSRelease:
    id: str = ""  # "debian", "ubuntu"
    version_id: str = ""  # "12", "22.04"
    codename: str = ""  # "bookworm"
    id_like: tuple[str, ...] = ()
    pretty_name: str = ""


@dataclass(frozen=True)
class Inventory:
    reference: str  # what the user asked for
    image_id: str  # sha256:<config digest>
    created: str = ""  # the config's `created`, RFC 3339
    architecture: str = ""
    os: str = ""
    repo_digests: tuple[str, ...] = ()  # name@sha256:<manifest digest>
    labels: dict[str, str] = field(default_factory=dict)
    layers: tuple[Layer, ...] = ()
    size_kind: str = "uncompressed"  # local engine: uncompressed layer sizes; registry: compressed blob sizes
    os_release: OSRelease = OSRelease()
    debs: tuple[DebPackage, ...] = ()  # sorted by (name, architecture)
    pythons: tuple[PyDist, ...] = ()  # sorted by (normalized name, version, location)
    source: str = "engine"  # "engine" or "registry"
    bundled: tuple[Bundled, ...] = ()  # outside dpkg and Python: code-server and its node (bundled.py)


_NORMALIZE = re.compile(r"[-_.]+")


def normalize_name(name: str) -> str:
    """PEP 503 normalized project name (also the purl's pypi name)."""
    return _NORMALIZE.sub("-", name).lower()


@dataclass(frozen=True)
class ImageFiles:
    """What an inventory reads from an image's files (the slow part: the whole filesystem streamed by); the rest of
    an Inventory comes from the engine's inspect and history answers."""

    os_release: OSRelease = OSRelease()
    debs: tuple[DebPackage, ...] = ()
    pythons: tuple[PyDist, ...] = ()
    bundled: tuple[Bundled, ...] = ()
