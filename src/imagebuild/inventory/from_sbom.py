"""An Inventory read back from a CycloneDX SBOM that cyclonedx.make_sbom wrote (the one a signed push attests for the
pushed digest): what `imagebuild audit` of a registry tag needs without pulling the image.

What comes back (the inverse of cyclonedx.py): the OS release (the `operating-system` component: name = os-release
ID, version = VERSION_ID, description = PRETTY_NAME; the codename from a `codenames` table the caller gives, else from
PRETTY_NAME's "(bookworm)"), every dpkg package (`imagebuild:package-type` deb: name, version, architecture from the
purl's `arch=`, source package and source version from the `imagebuild:deb:source*` properties; the writer leaves out a source named
like the package, so it comes back as the package's name when a source version is there, else empty, which the audit
reads as the package itself, as dpkg.py reads a stanza without Source:), every Python distribution (`imagebuild:package-type` python: name,
version, `imagebuild:python:location`) and the image's architecture/ID/created/repo digests from the metadata's
`imagebuild:image:*` properties. Licenses, summaries and the like are not read back: the audit does not need them.

Anything not of that shape is an SbomError naming the JSON key (`components[3].version`), never a half inventory:

    inv = read_sbom(doc, "REPO@sha256:...", codenames={("debian", "12"): "bookworm"})
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from imagebuild.errors import ImagebuildError
from imagebuild.inventory.model import DebPackage, Inventory, OSRelease, PyDist, normalize_name

_CODENAME = re.compile(r"\(([a-z][a-z0-9-]*)\)")


class SbomError(ImagebuildError):
    """The SBOM is not a CycloneDX document of the shape make_sbom writes; the message names the key."""


def parse_sbom(data: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    """The SBOM as a dict from JSON text or an already parsed predicate; SbomError when not a JSON object."""
    if isinstance(data, Mapping):
        return dict(data)
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SbomError(f"the SBOM is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SbomError(f"the SBOM is not a JSON object (top level: {type(doc).__name__})")
    return doc


def _str(obj: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise SbomError(f"{where}.{key}: {'missing' if value is None else 'not a non-empty string'}")
    return value


def _properties(obj: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    props = obj.get("properties", [])
    if not isinstance(props, list):
        raise SbomError(f"{where}.properties: not a list")
    out = []
    for n, prop in enumerate(props):
        if not isinstance(prop, dict):
            raise SbomError(f"{where}.properties[{n}]: not an object")
        out.append((_str(prop, "name", f"{where}.properties[{n}]"),
                    _str(prop, "value", f"{where}.properties[{n}]", required=False)))
    return out


def _qualifiers(purl: str) -> dict[str, str]:
    query = purl.split("#", 1)[0].partition("?")[2]
    return {k: v for k, v in urllib.parse.parse_qsl(query)}


def _os_release(comp: Mapping[str, Any], where: str, codenames: Mapping[tuple[str, str], str]) -> OSRelease:
    os_id = _str(comp, "name", where)
    version = _str(comp, "version", where)
    pretty = _str(comp, "description", where, required=False)
    found = _CODENAME.search(pretty)
    codename = codenames.get((os_id, version)) or (found.group(1) if found else "")
    return OSRelease(id=os_id, version_id=version, codename=codename, pretty_name=pretty)


def read_sbom(doc: Mapping[str, Any], reference: str,
              codenames: Mapping[tuple[str, str], str] | None = None) -> Inventory:
    """The Inventory the SBOM `doc` describes, called `reference` (see the module docstring); SbomError naming the key
    that is missing or of the wrong type. No `operating-system` component is an error: the OS half cannot be
    audited without the release, and an SBOM without one would otherwise read as an image with no packages."""
    if doc.get("bomFormat") != "CycloneDX":
        raise SbomError(f"bomFormat: {doc.get('bomFormat')!r}, not 'CycloneDX'")
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        raise SbomError("metadata: missing or not an object")
    components = doc.get("components")
    if not isinstance(components, list):
        raise SbomError("components: missing or not a list")
    image: dict[str, list[str]] = {}
    for name, value in _properties(metadata, "metadata"):
        if name.startswith("imagebuild:image:"):
            image.setdefault(name.removeprefix("imagebuild:image:"), []).append(value)
    os_release: OSRelease | None = None
    debs: list[DebPackage] = []
    pythons: list[PyDist] = []
    for n, comp in enumerate(components):
        where = f"components[{n}]"
        if not isinstance(comp, dict):
            raise SbomError(f"{where}: not an object")
        if comp.get("type") == "operating-system":
            os_release = _os_release(comp, where, codenames or {})
            continue
        props = dict(_properties(comp, where))
        kind = props.get("imagebuild:package-type")
        if kind == "deb":
            name, version = _str(comp, "name", where), _str(comp, "version", where)
            arch = _qualifiers(_str(comp, "purl", where)).get("arch", "")
            source_version = props.get("imagebuild:deb:source-version", "")
            # the writer drops a source named like the package: back as dpkg read it when its version says it was there
            source = props.get("imagebuild:deb:source") or (name if source_version else "")
            debs.append(DebPackage(name, version, arch, source, source_version))
        elif kind == "python":
            pythons.append(PyDist(_str(comp, "name", where), _str(comp, "version", where),
                                  props.get("imagebuild:python:location", "")))
    if os_release is None:
        raise SbomError("components: no operating-system component (the OS release: os-release ID and VERSION_ID)")
    first = {k: v[0] for k, v in image.items() if v}
    return Inventory(
        reference=reference,
        image_id=first.get("id", ""),
        created=first.get("created", ""),
        architecture=first.get("architecture", ""),
        os=first.get("os", ""),
        repo_digests=tuple(image.get("repo-digest", ())),
        os_release=os_release,
        debs=tuple(sorted(debs, key=lambda d: (d.name, d.architecture))),
        pythons=tuple(sorted(pythons, key=lambda p: (normalize_name(p.name), p.version, p.location))),
        source="sbom",
    )
