"""Software an image carries outside dpkg and Python, from the pin files imagebuild writes beside it: the dev
flavor's code-server and the node it runs on (/etc/imagebuild/code-server.json, templates/files/build-code-server.j2
writes it from compat/data/code_server.yaml). A damaged or foreign file yields nothing, never an error: the SBOM then
lacks the component, as it would for software installed by hand."""

from __future__ import annotations

import json
from typing import Any

from imagebuild.inventory.model import Bundled

CODE_SERVER_PIN = "etc/imagebuild/code-server.json"
CODE_SERVER_HOME = "/opt/code-server"


def wanted(path: str) -> bool:
    return path == CODE_SERVER_PIN


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    return value if isinstance(value, str) else ""


def read_bundled(found: dict[str, bytes]) -> tuple[Bundled, ...]:
    raw = found.get(CODE_SERVER_PIN)
    if raw is None:
        return ()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return ()
    if not isinstance(doc, dict) or not _text(doc, "code-server"):
        return ()
    named = doc.get("license")
    licenses: dict[str, Any] = named if isinstance(named, dict) else {}
    out = [Bundled("code-server", _text(doc, "code-server"), f"pkg:npm/code-server@{_text(doc, 'code-server')}",
                   CODE_SERVER_HOME, tuple(x for x in [licenses.get("code-server")] if isinstance(x, str) and x),
                   _text(doc, "integrity"))]
    node, package = _text(doc, "node"), _text(doc, "node_package")
    if node:
        purl = f"pkg:npm/{package}@{node}" if package else f"pkg:generic/node@{node}"
        out.append(Bundled(package or "node", node, purl, f"{CODE_SERVER_HOME}/bin/node",
                           tuple(x for x in [licenses.get("node")] if isinstance(x, str) and x),
                           _text(doc, "node_integrity")))
    return tuple(out)
