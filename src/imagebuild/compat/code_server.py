"""Typed view of compat/data/code_server.yaml: the code-server releases the dev flavor's `vscode:` key may name, the
Node each needs (npm's node-linux-<arch> packages, pinned per platform) and the npm that installs it.

No decisions here: matrix/fields.py checks a matrix's choice, render/image.py renders the build from these pins.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from imagebuild.compat.tables import vtuple

DATA_FILE = "compat/data/code_server.yaml"  # as messages name it


@dataclass(frozen=True)
class NpmTarball:
    """One npm package version, pinned by its registry `dist.integrity` (sha512-<base64>)."""

    package: str
    version: str
    integrity: str
    license: str
    registry: str

    @property
    def url(self) -> str:
        """npm's tarball address: <registry>/<name>/-/<last part of the name>-<version>.tgz."""
        return f"{self.registry}/{self.package}/-/{self.package.rsplit('/', 1)[-1]}-{self.version}.tgz"

    @property
    def sha512_hex(self) -> str:
        """The integrity as the hex digest `sha512sum` prints."""
        import base64

        return base64.b64decode(self.integrity.removeprefix("sha512-")).hex()


@dataclass(frozen=True)
class Release:
    version: str
    node: str  # the Node major it needs ("24")
    integrity: str
    license: str
    confirmed: bool
    note: str = ""


@dataclass(frozen=True)
class NodeBuild:
    major: str
    version: str
    license: str
    platforms: dict[str, tuple[str, str]]  # platform -> (npm package, integrity)


@dataclass(frozen=True)
class CodeServerTables:
    default: str
    registry: str
    releases: dict[str, Release]
    node: dict[str, NodeBuild]
    npm: NpmTarball

    def choices(self) -> list[str]:
        """The releases a matrix may name (newest first): those whose Node is pinned for some platform."""
        usable = [v for v, r in self.releases.items() if self.node.get(r.node) and self.node[r.node].platforms]
        return sorted(usable, key=vtuple, reverse=True)

    def missing_node(self, version: str, platforms: tuple[str, ...]) -> list[str]:
        """The platforms among `platforms` that have no pinned Node build for `version` (all of them when its Node
        major has none)."""
        build = self.node.get(self.releases[version].node)
        return [p for p in platforms if build is None or p not in build.platforms]

    def code_server(self, version: str) -> NpmTarball:
        r = self.releases[version]
        return NpmTarball("code-server", version, r.integrity, r.license, self.registry)

    def node_for(self, version: str, platform: str) -> NpmTarball:
        """The node-linux-<arch> tarball for `version` on `platform` (KeyError when there is none: check first)."""
        build = self.node[self.releases[version].node]
        package, integrity = build.platforms[platform]
        return NpmTarball(package, build.version, integrity, build.license, self.registry)


def _read(data_dir: Path | None) -> dict[str, Any]:
    if data_dir is not None:
        text = (data_dir / "code_server.yaml").read_text(encoding="utf-8")
    else:
        text = resources.files("imagebuild.compat").joinpath("data").joinpath("code_server.yaml") \
            .read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def load_from(data_dir: Path | None = None) -> CodeServerTables:
    raw = _read(data_dir)
    registry = str(raw.get("registry") or "https://registry.npmjs.org").rstrip("/")
    releases = {
        str(v): Release(version=str(v), node=str(row["node"]), integrity=str(row["integrity"]),
                        license=str(row.get("license") or ""), confirmed=bool(row.get("confirmed", False)),
                        note=str(row.get("note") or ""))
        for v, row in (raw.get("releases") or {}).items()
    }
    node = {
        str(major): NodeBuild(major=str(major), version=str(row["version"]), license=str(row.get("license") or ""),
                              platforms={str(p): (str(b["package"]), str(b["integrity"]))
                                         for p, b in (row.get("platforms") or {}).items()})
        for major, row in (raw.get("node") or {}).items()
    }
    npm = raw.get("npm") or {}
    return CodeServerTables(default=str(raw["default"]), registry=registry, releases=releases, node=node,
                            npm=NpmTarball("npm", str(npm["version"]), str(npm["integrity"]),
                                           str(npm.get("license") or ""), registry))


@functools.lru_cache(maxsize=1)
def load() -> CodeServerTables:
    """The packaged table, parsed once per process."""
    return load_from(None)
