"""One image's audit as a CycloneDX 1.6 document of `vulnerabilities` (a vulnerability disclosure report): each
finding is a vulnerability naming its IDs (the first as `id`, the others as `references`), the source that reported
it, its severity, the fixed version as the recommendation, and the affected package (a component with its purl) at
its installed version. What the audit could not consult is said in the metadata's properties (`imagebuild:audit:
not-checked`), so an empty `vulnerabilities` list of a half that was not checked never reads as clean.

Input: the record's audit entry (record/audits.audit_entry: image_id, image, at, tool, sources, findings). Output is
deterministic for one entry (the serial number is derived from the image ID and the audit's time).

    bom = vulnerabilities_bom(entry)
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote

SPEC_VERSION = "1.6"
SEVERITIES = ("critical", "high", "medium", "low", "info", "none", "unknown")  # CycloneDX's severity enum
_VULN_ID = re.compile(r"^(CVE-\d{4}-\d+|GHSA-[\w-]+|PYSEC-[\w-]+|DSA-[\w-]+|DLA-[\w-]+|USN-[\w-]+|OSV-[\w-]+|"
                      r"[A-Z][A-Z0-9]*-[\w.-]+)$")
_SOURCES = {"CVE": ("NVD", "https://nvd.nist.gov/vuln/detail/"), "GHSA": ("GitHub", "https://github.com/advisories/"),
            "PYSEC": ("PyPA", "https://osv.dev/vulnerability/"), "DSA": ("Debian", "https://security-tracker.debian.org/tracker/"),
            "DLA": ("Debian", "https://security-tracker.debian.org/tracker/"), "USN": ("Ubuntu", "https://ubuntu.com/security/notices/")}


def _q(text: str) -> str:
    return quote(text, safe=".-_~")


def purl(finding: dict[str, Any]) -> str:
    """pkg:deb/<distro>/<name>@<version> for a dpkg package (distro from the source: `debian-security …`),
    pkg:pypi/<name>@<version> for a Python distribution."""
    name, version = str(finding.get("package") or "?"), str(finding.get("installed") or "")
    if finding.get("kind") == "python":
        return f"pkg:pypi/{_q(re.sub(r'[-_.]+', '-', name).lower())}@{_q(version)}"
    distro = str(finding.get("source") or "").split("-security", 1)[0].split(" ", 1)[0] or "debian"
    return f"pkg:deb/{_q(distro.lower())}/{_q(name)}@{_q(version)}"


def _source_of(vuln_id: str, finding: dict[str, Any]) -> dict[str, str]:
    prefix = vuln_id.split("-", 1)[0]
    if prefix in _SOURCES:
        name, url = _SOURCES[prefix]
        return {"name": name, "url": url + vuln_id}
    return {"name": str(finding.get("source") or "imagebuild audit")}


def _vulnerability(n: int, finding: dict[str, Any], ref: str) -> dict[str, Any]:
    ids = [str(i) for i in finding.get("ids") or [] if _VULN_ID.match(str(i))]
    fixed = str(finding.get("fixed") or "")
    # an OS finding without readable IDs is still a security fix: named by the source package and fixed version
    vuln_id = ids[0] if ids else f"{finding.get('source_package') or finding.get('package')}@{fixed or 'unfixed'}"
    severity = str(finding.get("severity") or "unknown")
    vuln: dict[str, Any] = {
        "bom-ref": f"vuln-{n}", "id": vuln_id,
        "source": _source_of(vuln_id, finding) if ids else {"name": str(finding.get("source") or "imagebuild audit")},
        "ratings": [{"source": {"name": str(finding.get("source") or "")},
                     "severity": severity if severity in SEVERITIES else "unknown"}],
        "recommendation": f"upgrade {finding.get('package')} to {fixed}" if fixed else "no fixed version known",
        "affects": [{"ref": ref, "versions": [{"version": str(finding.get("installed") or ""),
                                                "status": "affected"}]}],
        "properties": [{"name": "imagebuild:audit:source", "value": str(finding.get("source") or "")},
                       {"name": "imagebuild:audit:kind", "value": str(finding.get("kind") or "")},
                       {"name": "imagebuild:audit:violates-policy", "value": "true" if finding.get("violates")
                        else "false"}],
    }
    if ids[1:]:
        vuln["references"] = [{"id": i, "source": _source_of(i, finding)} for i in ids[1:]]
    if fixed:
        vuln["properties"].append({"name": "imagebuild:audit:fixed-version", "value": fixed})
    if finding.get("source_package"):
        vuln["properties"].append({"name": "imagebuild:audit:source-package", "value": str(finding["source_package"])})
    if finding.get("note"):
        vuln["detail"] = str(finding["note"])
    if finding.get("date"):
        vuln["properties"].append({"name": "imagebuild:audit:source-date", "value": str(finding["date"])})
    return vuln


def vulnerabilities_bom(entry: dict[str, Any]) -> dict[str, Any]:
    """The CycloneDX 1.6 document of one record audit entry (see the module docstring)."""
    image_id, at = str(entry["image_id"]), str(entry["at"])
    components: dict[str, dict[str, Any]] = {}
    vulns = []
    for n, finding in enumerate(entry.get("findings") or [], 1):
        ref = purl(finding)
        components.setdefault(ref, {"type": "library", "bom-ref": ref, "name": str(finding.get("package") or "?"),
                                    "version": str(finding.get("installed") or ""), "purl": ref})
        vulns.append(_vulnerability(n, finding, ref))
    props = [{"name": "imagebuild:audit:image-id", "value": image_id}]
    for s in entry.get("sources") or []:
        state = "checked" if s.get("state") == "checked" else "not-checked"
        props.append({"name": f"imagebuild:audit:{state}", "value": f"{s.get('source')}: {s.get('detail')}"
                      + (f" (date {s['date']})" if s.get("date") else "")})
    if not entry.get("sources"):
        props.append({"name": "imagebuild:audit:not-checked", "value": "no source was consulted"})
    props += [{"name": "imagebuild:audit:not-looked-up",
               "value": f"{m.get('package')} {m.get('version')} ({m.get('source')}): {m.get('reason')}"}
              for m in entry.get("not_looked_up") or []]
    return {
        "bomFormat": "CycloneDX", "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'imagebuild-audit:{image_id}:{at}')}",
        "version": 1,
        "metadata": {
            "timestamp": at,
            "tools": {"components": [{"type": "application", "name": "imagebuild",
                                      "version": str(entry.get("tool") or "unknown")}]},
            "component": {"type": "container", "bom-ref": "image", "name": str(entry.get("image") or image_id),
                          "version": image_id},
            "properties": props,
        },
        "components": list(components.values()),
        "vulnerabilities": vulns,
    }
