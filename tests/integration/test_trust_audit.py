"""Issue 42 item 5 against a REAL registry (Debian's docker-registry) and the REAL cosign: the signer attaches an
audit as cosign's vuln attestation (a CycloneDX 1.6 vulnerabilities document as its result) beside the SBOM and the
provenance, and `imagebuild verify --max-audit-age` passes on a fresh one, refuses a stale one (naming the digest,
the age and the limit), says none was found on an image without one, and does not take another key's.

No engine: each test pushes its own tiny OCI image with skopeo (as test_trust_redaction does), signs it through
imagebuild.sign.sign_digest, then runs the CLI."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import cosign_key_pair, imagebuild, start_registry, stop_registry  # noqa: E402

from imagebuild.audit.cyclonedx import vulnerabilities_bom  # noqa: E402
from imagebuild.record import now  # noqa: E402
from imagebuild.record.audits import audit_entry  # noqa: E402
from imagebuild.sign.audit import vuln_predicate  # noqa: E402
from imagebuild.sign.cosign import Registry  # noqa: E402
from imagebuild.sign.keys import SigningKey  # noqa: E402
from imagebuild.sign.signer import sign_digest  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
KEY_PASSWORD = "kp-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def tools(cosign, tmp_path_factory):
    if not (shutil.which("docker-registry") and shutil.which("skopeo")):
        pytest.skip("docker-registry and skopeo are needed (scripts/system-deps.sh)")
    keys = tmp_path_factory.mktemp("audit-keys")
    for name in ("good", "other"):
        cosign_key_pair(cosign, keys / name, KEY_PASSWORD)
    info = start_registry(None)
    yield cosign, keys, info["REGISTRY"], tmp_path_factory.mktemp("audit-work")
    stop_registry(info)


def _push(address: str, work: Path, name: str) -> str:
    """A tiny image of its own content as ADDRESS/audit/NAME:1; its REPO@DIGEST as served."""
    layout = work / f"oci-{name}"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> tuple[str, int]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return "sha256:" + digest, len(data)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(name)
        tar.addfile(info, io.BytesIO(name.encode()))
    layer = blob(buf.getvalue())
    config = blob(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                              "rootfs": {"type": "layers", "diff_ids": [layer[0]]}}).encode())
    manifest = blob(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                           "digest": config[0], "size": config[1]},
                                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                            "digest": layer[0], "size": layer[1]}]}).encode())
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest[0], "size": manifest[1],
        "annotations": {"org.opencontainers.image.ref.name": "1"}}]}))
    digest_file = work / f"digest-{name}"
    done = subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", "--digestfile", str(digest_file),
                           f"oci:{layout}:1", f"docker://{address}/audit/{name}:1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return f"{address}/audit/{name}@{digest_file.read_text().strip()}"


def _audit(at: str) -> dict:
    return audit_entry({"image": "x", "image_id": "sha256:" + "1a" * 32,
                        "sources": [{"source": "python osv", "state": "checked", "detail": "fixture", "date": ""},
                                    {"source": "debian-security bookworm-security", "state": "not checked",
                                     "detail": "offline", "date": ""}],
                        "findings": [{"source": "python osv", "kind": "python", "package": "urllib3",
                                      "installed": "1.26.4", "fixed": "1.26.5", "ids": ["PYSEC-2021-108"],
                                      "severity": "high", "source_package": "", "date": "", "note": "",
                                      "violates": True}], "not_looked_up": []}, at, "test")


def _sign(tools, ref: str, key: str = "good", audit: dict | None = None) -> None:
    cosign, keys, address, _ = tools
    signing = SigningKey(str(keys / f"{key}.key"), KEY_PASSWORD)
    sign_digest(ref, signing, Registry(address, allow_http=True), public_key_pem=(keys / f"{key}.pub").read_text(),
                sbom={"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []},
                provenance={"buildDefinition": {"buildType": "x", "externalParameters": {}},
                            "runDetails": {"builder": {"id": "https://imagebuild.dev/builder"}}},
                audit=vuln_predicate(audit, vulnerabilities_bom(audit)) if audit else None)


def _verify(tools, ref: str, *extra: str):
    cosign, keys, _, work = tools
    env = {"IMAGEBUILD_COSIGN": cosign, "IMAGEBUILD_REGISTRY_USER": "", "IMAGEBUILD_REGISTRY_PASSWORD": "",
           "DOCKER_CONFIG": str(work / "no-config")}
    return imagebuild("verify", ref, "--key", str(keys / "good.pub"), *extra, env=env, timeout=180)


def _error_line(res) -> str:
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_fresh_audit_verifies_a_stale_one_is_refused(tools):
    ref = _push(tools[2], tools[3], "fresh")
    _sign(tools, ref, audit=_audit(now()))
    ok = _verify(tools, ref, "--max-audit-age", "7d", "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    digest = ref.split("@", 1)[1]
    facts = doc["audits"][digest]
    assert facts["vulnerabilities"] == 1 and facts["not_checked"] == ["debian-security bookworm-security: offline"]
    assert doc["attestations"]["cyclonedx"]["predicate"]["specVersion"] == "1.6"  # the SBOM beside it, untouched
    # the same bytes audited long ago only: refused, naming the digest, the age and the limit
    old_ref = _push(tools[2], tools[3], "stale")
    _sign(tools, old_ref, audit=_audit("2025-01-01T00:00:00Z"))
    line = _error_line(_verify(tools, old_ref, "--max-audit-age", "7d"))
    assert old_ref.split("@", 1)[1] in line and "audited 2025-01-01T00:00:00Z" in line
    assert "older than --max-audit-age 7d" in line and " old (" in line
    # a newer audit of the same digest added beside it: now fresh
    _sign(tools, old_ref, audit=_audit(now()))
    assert _verify(tools, old_ref, "--max-audit-age", "7d").returncode == 0


def test_no_audit_or_another_keys_audit_is_an_error(tools):
    ref = _push(tools[2], tools[3], "none")
    _sign(tools, ref)
    assert _verify(tools, ref).returncode == 0  # not asked: verify as before
    line = _error_line(_verify(tools, ref, "--max-audit-age", "7d"))
    assert f"no audit attestation of {ref.split('@', 1)[1]} was found" in line and "never clean" in line
    other = _push(tools[2], tools[3], "other")
    _sign(tools, other)
    _sign(tools, other, key="other", audit=_audit(now()))  # only another key audited it
    line = _error_line(_verify(tools, other, "--max-audit-age", "7d"))
    assert "vuln attestation" in line and "clean" not in line.replace("never clean", "")


STATUS = """\
Package: libssl3
Status: install ok installed
Architecture: amd64
Source: openssl
Version: 3.0.11-1~deb12u2

Package: tini
Status: install ok installed
Architecture: amd64
Version: 0.19.0-1

"""


def _config_digest(ref: str) -> str:
    """The pushed manifest's config digest (the image ID an SBOM of it names), read from the registry over HTTP."""
    import urllib.request

    repo_part, digest = ref.split("@", 1)
    address, repo = repo_part.split("/", 1)
    req = urllib.request.Request(f"http://{address}/v2/{repo}/manifests/{digest}",
                                 headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as answer:
        return json.loads(answer.read())["config"]["digest"]


def test_a_pushed_digest_is_audited_by_its_attested_sbom(tools):
    """`audit --image docker://REPO@DIGEST` on a real registry with the real cosign: the SBOM attested for exactly
    that digest (an old libssl3 from the real bookworm-security index's point of view, urllib3 1.26.4 against the
    OSV fixture) is audited without pulling; with --verify-key cosign checks it first, without one the result says
    the SBOM was NOT VERIFIED; another key is one error line; a digest with no SBOM attached is one error line."""
    from imagebuild.inventory import dpkg, make_sbom, pydist
    from imagebuild.inventory.model import Inventory, OSRelease

    cosign, keys, address, work = tools
    ref = _push(address, work, "sbom")
    meta = b"Metadata-Version: 2.1\nName: urllib3\nVersion: 1.26.4\n"
    found = {"var/lib/dpkg/status": STATUS.encode(),
             "opt/venv/lib/python3.11/site-packages/urllib3-1.26.4.dist-info/METADATA": meta}
    inv = Inventory(reference=ref, image_id=_config_digest(ref), created="2026-12-06T00:00:00Z",
                    architecture="amd64", os="linux", repo_digests=(ref,), labels={}, layers=(),
                    os_release=OSRelease(id="debian", version_id="12", codename="bookworm",
                                         pretty_name="Debian GNU/Linux 12 (bookworm)"),
                    debs=tuple(dpkg.read_database(found)), pythons=tuple(pydist.read_distributions(found)))
    signing = SigningKey(str(keys / "good.key"), KEY_PASSWORD)
    sign_digest(ref, signing, Registry(address, allow_http=True), public_key_pem=(keys / "good.pub").read_text(),
                sbom=make_sbom(inv),
                provenance={"buildDefinition": {"buildType": "x", "externalParameters": {}},
                            "runDetails": {"builder": {"id": "https://imagebuild.dev/builder"}}})
    env = {"IMAGEBUILD_COSIGN": cosign, "IMAGEBUILD_REGISTRY_USER": "", "IMAGEBUILD_REGISTRY_PASSWORD": "",
           "DOCKER_CONFIG": str(work / "no-config"), "IMAGEBUILD_VERIFY_KEY": ""}
    osv = str(Path(__file__).resolve().parents[1] / "fixtures" / "osv")
    args = ["audit", "--image", f"docker://{ref}", "--osv", osv, "--no-changelogs", "--json"]
    checked = imagebuild(*args, "--verify-key", str(keys / "good.pub"), env=env, timeout=300)
    assert checked.returncode == 1, (checked.stdout[-2000:], checked.stderr[-2000:])  # findings violate the policy
    [row] = json.loads(checked.stdout)["images"]
    digest = ref.split("@", 1)[1]
    assert row["image_id"] == digest and "Traceback" not in checked.stderr  # the digest, never the tag again
    found_pkgs = {(f["package"], f["installed"]) for f in row["findings"]}
    assert ("libssl3", "3.0.11-1~deb12u2") in found_pkgs and ("urllib3", "1.26.4") in found_pkgs, row["findings"]
    assert not any("NOT VERIFIED" in s.get("detail", "") for s in row["sources"]), row["sources"]
    unverified = imagebuild(*args, env=env, timeout=300)
    [row2] = json.loads(unverified.stdout)["images"]
    assert {(f["package"], f["installed"]) for f in row2["findings"]} == found_pkgs
    assert any("NOT VERIFIED" in json.dumps(s) for s in row2["sources"]), row2["sources"]
    wrong = imagebuild(*args[:-1], "--verify-key", str(keys / "other.pub"), env=env, timeout=300)
    assert "error:" in _error_line(wrong) and digest in _error_line(wrong)
    bare = _push(address, work, "nosbom")
    line = _error_line(imagebuild("audit", "--image", f"docker://{bare}", "--osv", osv, env=env, timeout=120))
    assert bare.split("@", 1)[1] in line and "SBOM" in line.upper()
