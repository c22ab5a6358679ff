"""A CycloneDX 1.6 JSON SBOM of an Inventory, written with the standard library.

Deterministic: components are sorted, the serial number is a UUID derived from the image ID (and the wheel hashes
given), the timestamp is SOURCE_DATE_EPOCH or the image's `created` — the same image gives the same bytes, so two
SBOMs diff cleanly.

purls: `pkg:deb/<debian|ubuntu>/<name>@<version>?arch=<arch>&distro=<id>-<version_id>` (what CVE scanners match on)
and `pkg:pypi/<normalized name>@<version>`; the image itself is metadata.component (type container) with
`pkg:oci/<name>@<manifest digest>` when the image has a registry digest.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from imagebuild import __version__
from imagebuild.inventory.model import Bundled, DebPackage, Inventory, PyDist, normalize_name

SPEC_VERSION = "1.6"
SCHEMA = "http://cyclonedx.org/schema/bom-1.6.schema.json"
_SERIAL_NAMESPACE = uuid.UUID("6f1d3a52-8a0e-4bb8-9d59-0d7f0e3c9b21")  # fixed: serials are reproducible
Hashes = Mapping[tuple[str, str], str]  # (name, version) -> sha256 hex of the wheel file installed


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe=".-_~")


def deb_namespace(inv: Inventory) -> str:
    ids = (inv.os_release.id, *inv.os_release.id_like)
    return next((i for i in ids if i in ("debian", "ubuntu")), inv.os_release.id or "debian")


def distro(inv: Inventory) -> str:
    rel = inv.os_release
    return f"{rel.id}-{rel.version_id}" if rel.id and rel.version_id else rel.codename or rel.id


def deb_purl(pkg: DebPackage, inv: Inventory) -> str:
    qualifiers = []
    if pkg.architecture:
        qualifiers.append(f"arch={_q(pkg.architecture)}")
    if distro(inv):
        qualifiers.append(f"distro={_q(distro(inv))}")
    tail = "?" + "&".join(qualifiers) if qualifiers else ""
    return f"pkg:deb/{deb_namespace(inv)}/{_q(pkg.name)}@{_q(pkg.version)}{tail}"


def pypi_purl(dist: PyDist) -> str:
    return f"pkg:pypi/{_q(normalize_name(dist.name))}@{_q(dist.version)}"


def timestamp(inv: Inventory, env: Mapping[str, str] | None = None) -> str:
    """SOURCE_DATE_EPOCH when set, else the image's `created` (UTC, whole seconds), else the epoch."""
    env = os.environ if env is None else env
    epoch = env.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        when = datetime.fromtimestamp(int(epoch), tz=timezone.utc)
    else:
        try:
            when = datetime.fromisoformat(_iso(inv.created)).astimezone(timezone.utc)
        except ValueError:
            when = datetime.fromtimestamp(0, tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso(created: str) -> str:
    # engines write nanoseconds ("2024-05-01T10:00:00.123456789Z"); fromisoformat takes at most microseconds
    text = created.strip().replace("Z", "+00:00")
    if "." in text:
        head, _, rest = text.partition(".")
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6]}{zone}"
    return text


def _licenses_py(dist: PyDist) -> list[dict[str, Any]]:
    if dist.license_expression:
        return [{"expression": dist.license_expression}]
    names = [dist.license] if dist.license else list(dist.license_classifiers)
    return [{"license": {"name": n}} for n in names]


def _deb_component(pkg: DebPackage, inv: Inventory) -> dict[str, Any]:
    c: dict[str, Any] = {"type": "library", "bom-ref": deb_purl(pkg, inv), "name": pkg.name, "version": pkg.version}
    if pkg.maintainer:
        c["publisher"] = pkg.maintainer
    if pkg.summary:
        c["description"] = pkg.summary
    if pkg.licenses:
        c["licenses"] = [{"license": {"name": n}} for n in pkg.licenses]
    c["purl"] = deb_purl(pkg, inv)
    if pkg.homepage:
        c["externalReferences"] = [{"type": "website", "url": pkg.homepage}]
    props = [("imagebuild:package-type", "deb")]
    if pkg.source and pkg.source != pkg.name:
        props.append(("imagebuild:deb:source", pkg.source))
    if pkg.source_version:
        props.append(("imagebuild:deb:source-version", pkg.source_version))
    c["properties"] = [{"name": k, "value": v} for k, v in props]
    return c


def _py_component(dist: PyDist, ref: str, hashes: Hashes) -> dict[str, Any]:
    c: dict[str, Any] = {"type": "library", "bom-ref": ref, "name": dist.name, "version": dist.version}
    if dist.summary:
        c["description"] = dist.summary
    sha = hashes.get((dist.key, dist.version))
    if sha:
        c["hashes"] = [{"alg": "SHA-256", "content": sha.lower().removeprefix("sha256:")}]
    licenses = _licenses_py(dist)
    if licenses:
        c["licenses"] = licenses
    c["purl"] = pypi_purl(dist)
    if dist.homepage:
        c["externalReferences"] = [{"type": "website", "url": dist.homepage}]
    c["properties"] = [{"name": "imagebuild:package-type", "value": "python"},
                       {"name": "imagebuild:python:location", "value": dist.location}]
    return c


def _bundled_component(b: Bundled) -> dict[str, Any]:
    c: dict[str, Any] = {"type": "application" if b.name == "code-server" else "library", "bom-ref": b.purl,
                         "name": b.name, "version": b.version}
    if b.integrity.startswith("sha512-"):
        import base64

        c["hashes"] = [{"alg": "SHA-512", "content": base64.b64decode(b.integrity[7:]).hex()}]
    if b.licenses:
        c["licenses"] = [{"license": {"id": n}} for n in b.licenses]
    c["purl"] = b.purl
    c["properties"] = [{"name": "imagebuild:package-type", "value": "npm"},
                       {"name": "imagebuild:location", "value": b.location}]
    return c


def _image_component(inv: Inventory) -> dict[str, Any]:
    name = inv.reference
    c: dict[str, Any] = {"type": "container", "bom-ref": inv.image_id, "name": name, "version": inv.image_id}
    if inv.image_id.startswith("sha256:"):
        c["hashes"] = [{"alg": "SHA-256", "content": inv.image_id.removeprefix("sha256:")}]
    if inv.repo_digests:
        repo, _, digest = inv.repo_digests[0].partition("@")
        last = repo.rsplit("/", 1)[-1]
        c["purl"] = f"pkg:oci/{_q(last)}@{_q(digest)}?repository_url={_q(repo)}"
    return c


def serial_number(inv: Inventory, hashes: Hashes) -> str:
    seed = inv.image_id + "".join(f"\n{n}=={v}:{h}" for (n, v), h in sorted(hashes.items()))
    return f"urn:uuid:{uuid.uuid5(_SERIAL_NAMESPACE, seed)}"


def make_sbom(inv: Inventory, hashes: Hashes | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The SBOM as a JSON-ready dict. `hashes`: {(name, version): sha256} of the wheel files installed (from the
    lock); names are normalized here, so any spelling works."""
    norm = {(normalize_name(n), v): h for (n, v), h in (hashes or {}).items()}
    components: list[dict[str, Any]] = []
    if inv.os_release.id:
        os_c: dict[str, Any] = {"type": "operating-system", "bom-ref": f"os:{inv.os_release.id}",
                                "name": inv.os_release.id}
        if inv.os_release.version_id:
            os_c["version"] = inv.os_release.version_id
        if inv.os_release.pretty_name:
            os_c["description"] = inv.os_release.pretty_name
        components.append(os_c)
    components += [_deb_component(p, inv) for p in inv.debs]
    refs: dict[str, int] = {}
    for d in inv.pythons:
        refs[pypi_purl(d)] = refs.get(pypi_purl(d), 0) + 1
    for d in inv.pythons:  # the same distribution in two site-packages: one component each, told apart by location
        ref = pypi_purl(d) if refs[pypi_purl(d)] == 1 else f"{pypi_purl(d)}#{d.location}"
        components.append(_py_component(d, ref, norm))
    components += [_bundled_component(b) for b in inv.bundled]
    properties = [{"name": k, "value": v} for k, v in sorted(inv.labels.items())]
    properties += [{"name": f"imagebuild:image:{k}", "value": v} for k, v in (
        ("id", inv.image_id), ("architecture", inv.architecture), ("os", inv.os), ("created", inv.created)) if v]
    properties += [{"name": "imagebuild:image:repo-digest", "value": d} for d in inv.repo_digests]
    properties += [{"name": "imagebuild:image:layer", "value": layer.diff_id} for layer in inv.layers]
    return {
        "$schema": SCHEMA,
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": serial_number(inv, norm),
        "version": 1,
        "metadata": {
            "timestamp": timestamp(inv, env),
            "lifecycles": [{"phase": "post-build"}],
            "tools": {"components": [{"type": "application", "name": "imagebuild", "version": __version__}]},
            "component": _image_component(inv),
            "properties": properties,
        },
        "components": components,
    }


def dumps(sbom: dict[str, Any]) -> str:
    """Stable text: two-space indent, keys in the order written, a final newline."""
    return json.dumps(sbom, indent=2, ensure_ascii=False) + "\n"
