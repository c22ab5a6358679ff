"""`imagebuild audit --image docker://REGISTRY/REPO:TAG`: a pushed digest audited by the CycloneDX SBOM attested for
it (inventory/from_sbom.py, pipeline/sbom_audit.py), over the one fake registry (no network but the security index
the other audit tests read, _security_index.py).

The SBOM is made by the project's own writer (inventory.cyclonedx.make_sbom) from a fake inventory and attached as
cosign stores it: the `sha256-<hex>.att` manifest, one DSSE envelope per layer, its payload an in-toto statement."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys

import pytest
from _fake_registry import FakeRegistry, sha
from _inventory_cases import fixture_inventory

from imagebuild.audit.model import CHECKED, NOT_CHECKED
from imagebuild.errors import ImagebuildError
from imagebuild.inventory import make_sbom
from imagebuild.inventory.from_sbom import SbomError, read_sbom

REPO = "ml/pytorch"
HOST = "reg.example:5000"
CYCLONEDX = "https://cyclonedx.org/bom"
NO_EPOCH: dict[str, str] = {}


def _push(reg: FakeRegistry, inv, tag: str = "runtime") -> tuple[str, str]:
    """The image's manifest under `tag` (its config's digest is the inventory's image ID); (manifest digest, image ID)."""
    config = json.dumps({"architecture": inv.architecture, "os": "linux", "rootfs": {"diff_ids": []}}).encode()
    cfg = reg.put_image(REPO, tag, config, [])
    return reg.tags[(REPO, tag)], cfg


def _attach(reg: FakeRegistry, digest: str, predicate, *, subject: str | None = None,
            predicate_type: str = CYCLONEDX, raw_layer: bytes | None = None) -> None:
    """What `cosign attest --type cyclonedx` leaves beside `digest`: one more DSSE envelope in its .att manifest."""
    statement = {"_type": "https://in-toto.io/Statement/v0.1", "predicateType": predicate_type,
                 "subject": [{"name": f"{HOST}/{REPO}", "digest": {"sha256": (subject or digest)[7:]}}],
                 "predicate": predicate}
    envelope = {"payloadType": "application/vnd.in-toto+json",
                "payload": base64.b64encode(json.dumps(statement).encode()).decode(),
                "signatures": [{"keyid": "", "sig": base64.b64encode(b"0" * 70).decode()}]}
    layer = reg.put_blob(raw_layer if raw_layer is not None else json.dumps(envelope).encode())
    tag = digest.replace(":", "-") + ".att"
    old = reg.manifests.get(reg.tags.get((REPO, tag), ""))
    layers = json.loads(old)["layers"] if old else []
    layers.append({"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": layer, "size": 1})
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(b"{}"), "size": 2},
                "layers": layers}
    reg.put_manifest(REPO, tag, json.dumps(manifest).encode())


@pytest.fixture
def registry(monkeypatch):
    import imagebuild.oci
    import imagebuild.pipeline.sbom_audit as sbom_audit

    reg = FakeRegistry(HOST)
    monkeypatch.setattr(sbom_audit, "RegistryClient", lambda *a, **k: reg)
    monkeypatch.setattr(imagebuild.oci, "resolve_auth", lambda host: None)
    return reg


def _pushed(reg: FakeRegistry, inv=None):
    """A fake inventory pushed and its SBOM attached: (inventory as pushed, manifest digest)."""
    inv = inv or fixture_inventory()
    digest, cfg = _push(reg, inv)
    inv = dataclasses.replace(inv, image_id=cfg, repo_digests=(f"{HOST}/{REPO}@{digest}",))
    _attach(reg, digest, make_sbom(inv, env=NO_EPOCH))
    return inv, digest


def _read(text: str, **kw):
    from imagebuild.compat import load as load_tables
    from imagebuild.pipeline.sbom_audit import registry_inventory

    return registry_inventory(text, load_tables(), **kw)


# -- the reader: SBOM -> inventory ------------------------------------------------------------------------------------

def test_round_trip_reads_back_every_package_the_writer_wrote():
    inv = fixture_inventory()
    back = read_sbom(json.loads(json.dumps(make_sbom(inv, env=NO_EPOCH))), "x", {("debian", "12"): "bookworm"})
    assert [(d.name, d.version, d.architecture, d.source, d.source_version) for d in back.debs] == \
        [(d.name, d.version, d.architecture, d.source, d.source_version) for d in inv.debs]
    assert any(d.source for d in back.debs)  # the fixture has binaries of another source package: kept
    assert [(p.name, p.version, p.location) for p in back.pythons] == \
        [(p.name, p.version, p.location) for p in inv.pythons]
    rel = back.os_release
    assert (rel.id, rel.version_id, rel.codename) == ("debian", "12", "bookworm")
    assert (back.image_id, back.architecture, back.repo_digests) == (inv.image_id, "amd64", inv.repo_digests)


def test_the_codename_comes_from_the_table_else_from_the_pretty_name():
    doc = make_sbom(fixture_inventory(), env=NO_EPOCH)
    assert read_sbom(doc, "x").os_release.codename == "bookworm"  # "Debian GNU/Linux 12 (bookworm)"
    doc["components"][0]["description"] = "Ubuntu 24.04.1 LTS"
    doc["components"][0].update(name="ubuntu", version="24.04")
    assert read_sbom(doc, "x", {("ubuntu", "24.04"): "noble"}).os_release.codename == "noble"


@pytest.mark.parametrize(("change", "key"), [
    (lambda d: d.pop("components"), "components: missing"),
    (lambda d: d["components"].append("x"), "not an object"),
    (lambda d: d["components"][1].pop("version"), "components[1].version: missing"),
    (lambda d: d["components"].pop(0), "no operating-system component"),
    (lambda d: d["components"][0].pop("version"), "components[0].version: missing"),
    (lambda d: d.update(bomFormat="SPDX"), "bomFormat"),
    (lambda d: d["metadata"].update(properties={}), "metadata.properties: not a list"),
])
def test_a_damaged_sbom_names_the_key(change, key):
    doc = make_sbom(fixture_inventory(), env=NO_EPOCH)
    change(doc)
    with pytest.raises(SbomError, match=key.replace("[", r"\[").replace("]", r"\]")):
        read_sbom(doc, "x")


# -- the registry: one digest, its attestation ------------------------------------------------------------------------

def test_a_tag_is_read_once_as_its_digest_and_said_unverified(registry):
    inv, digest = _pushed(registry)
    said: list[str] = []
    read = _read(f"docker://{HOST}/{REPO}:runtime", say=said.append)
    assert read.digest == digest and read.digest_ref == f"{HOST}/{REPO}@{digest}"
    assert read.status.state == NOT_CHECKED and "NOT VERIFIED" in read.status.detail and digest in read.status.detail
    assert [d.name for d in read.inventory.debs] == [d.name for d in inv.debs]
    assert "not verified" in said[-1]
    # registry.manifest_digest resolved the tag; every later read asked for the digest (or its .att), never the tag
    assert not [c for c in registry.calls if c.startswith("manifest") and "runtime" in c]


def test_no_sbom_attached_names_the_digest_and_what_to_do(registry):
    digest, _ = _push(registry, fixture_inventory())
    with pytest.raises(ImagebuildError) as caught:
        _read(f"docker://{HOST}/{REPO}:runtime")
    text = str(caught.value)
    assert digest in text and "no SBOM attestation" in text and "--sign-key" in text and "local image" in text
    # only another type attached (the provenance): still no SBOM
    _attach(registry, digest, {"buildDefinition": {}}, predicate_type="https://slsa.dev/provenance/v1")
    with pytest.raises(ImagebuildError, match="no SBOM attestation"):
        _read(f"docker://{HOST}/{REPO}:runtime")


def test_an_sbom_attestation_made_for_another_digest_is_refused(registry):
    inv = fixture_inventory()
    digest, _ = _push(registry, inv)
    other = "sha256:" + "ee" * 32
    _attach(registry, digest, make_sbom(inv, env=NO_EPOCH), subject=other)
    with pytest.raises(ImagebuildError, match=f"made for another digest \\({other}\\)"):
        _read(f"docker://{HOST}/{REPO}:runtime")


def test_an_sbom_of_another_image_config_is_refused(registry):
    inv = fixture_inventory()
    digest, _ = _push(registry, inv)  # the SBOM still says image ID ab..ab, the config is another
    _attach(registry, digest, make_sbom(inv, env=NO_EPOCH))
    with pytest.raises(ImagebuildError, match="describes image sha256:abab"):
        _read(f"docker://{HOST}/{REPO}:runtime")


@pytest.mark.parametrize(("predicate", "raw", "words"), [
    ("{not json", None, "the attached SBOM is damaged: the SBOM is not JSON"),
    (["a list"], None, "damaged: predicate: not a JSON object"),
    (None, None, "damaged: predicate: missing"),
    ({"bomFormat": "CycloneDX", "metadata": {}, "components": []}, None, "no operating-system component"),
    ({}, b"not an envelope", "is not JSON (no DSSE envelope)"),
])
def test_a_damaged_sbom_is_one_error_naming_the_digest(registry, predicate, raw, words):
    digest, _ = _push(registry, fixture_inventory())
    _attach(registry, digest, predicate, raw_layer=raw)
    with pytest.raises(ImagebuildError) as caught:
        _read(f"docker://{HOST}/{REPO}:runtime")
    assert words in str(caught.value) and digest in str(caught.value)


def test_a_verify_key_checks_the_digest_with_cosign_first(registry, monkeypatch, tmp_path):
    import imagebuild.sign.cosign
    import imagebuild.sign.verify
    from imagebuild.sign.keys import PublicKey

    inv, digest = _pushed(registry)
    asked = []

    def check_digest(name, at, key, reg, shown):
        asked.append((name, at, key.ref))
        return {"cyclonedx": {"subject": [], "predicate": make_sbom(inv, env=NO_EPOCH)}}

    monkeypatch.setattr(imagebuild.sign.verify, "check_digest", check_digest)
    monkeypatch.setattr(imagebuild.sign.cosign, "cosign_registry", lambda client, ca: None)
    read = _read(f"{HOST}/{REPO}:runtime", verify_key=PublicKey("cosign.pub"))
    assert asked == [(f"{HOST}/{REPO}", digest, "cosign.pub")]
    assert read.status.state == CHECKED and "verified with key cosign.pub" in read.status.detail

    def refused(*a):
        raise imagebuild.sign.verify.VerifyError(f"{HOST}/{REPO}@{digest}: {digest} is not signed")

    monkeypatch.setattr(imagebuild.sign.verify, "check_digest", refused)
    with pytest.raises(ImagebuildError, match="is not signed"):
        _read(f"{HOST}/{REPO}:runtime", verify_key=PublicKey("cosign.pub"))


def test_an_index_audits_the_platform_image_asked_for(registry):
    inv, digest = _pushed(registry)
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": 1,
                            "platform": {"os": "linux", "architecture": "amd64"}}]}
    index_digest = registry.put_manifest(REPO, "multi", json.dumps(index).encode())
    read = _read(f"docker://{HOST}/{REPO}:multi", platform="linux/amd64")
    assert read.digest == digest != index_digest
    with pytest.raises(ImagebuildError, match="has no linux/arm64 image; it has: linux/amd64"):
        _read(f"docker://{HOST}/{REPO}:multi", platform="linux/arm64")


# -- the audit: the same findings as a local image's ------------------------------------------------------------------

def test_the_sbom_audit_finds_what_the_local_image_audit_finds(registry, tmp_path, monkeypatch):
    from _fake_engine import FakeEngine
    from _security_index import packages_text, real_indexes, stanzas_of, status_file, tar_of

    import imagebuild.engine
    import imagebuild.pipeline.auditing as auditing
    from imagebuild.inventory import dpkg

    indexes, index = real_indexes()
    stanzas = stanzas_of(packages_text(index, indexes), {"libssl3", "openssl"})
    status = status_file(stanzas, {"libssl3": "3.0.11-1~deb12u2"})
    os_release = 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'
    engine = FakeEngine()
    iid = engine.add_image("img:1", {})
    engine.filesystems[iid] = tar_of({"etc/os-release": os_release, "var/lib/dpkg/status": status})
    engine.images_by_id[iid]["Architecture"] = "amd64"
    monkeypatch.setattr(imagebuild.engine, "connect", lambda purpose: engine)
    monkeypatch.setattr(auditing, "SecurityIndexes", lambda tables: indexes)
    monkeypatch.delenv("IMAGEBUILD_OSV_DB", raising=False)
    local = auditing.audit_images(["img:1"], None, str(tmp_path), None, False, lambda m: None)

    debs = tuple(dpkg.read_database({"var/lib/dpkg/status": status.encode()}))
    inv = fixture_inventory(debs=debs, pythons=())
    _, digest = _pushed(registry, inv)
    remote = auditing.audit_images([f"docker://{HOST}/{REPO}:runtime"], None, str(tmp_path), None, False,
                                   lambda m: None)
    (mine,), (theirs,) = local.json, remote.json
    assert mine["findings"] and theirs["findings"] == mine["findings"]  # libssl3 and its fixed version, the same
    assert theirs["image"] == f"docker://{HOST}/{REPO}:runtime" and theirs["image_id"] == digest
    assert theirs["sources"][0]["source"] == "sbom" and theirs["sources"][0]["state"] == NOT_CHECKED
    assert theirs["sources"][1:] == mine["sources"]
    assert remote.exit_code == local.exit_code == 1  # a security fix violates the default policy
    assert "sbom: NOT CHECKED: the SBOM attached to" in remote.text and digest[7:19] in remote.text


def test_the_command_says_one_error_line_never_a_traceback(registry, monkeypatch, capsys):
    import imagebuild.cli

    digest, _ = _push(registry, fixture_inventory())
    monkeypatch.delenv("IMAGEBUILD_VERIFY_KEY", raising=False)
    monkeypatch.setattr(sys, "argv", ["imagebuild", "audit", "--image", f"docker://{HOST}/{REPO}:runtime", "--json"])
    with pytest.raises(SystemExit) as code:
        imagebuild.cli.main()
    err = capsys.readouterr().err
    assert code.value.code == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and digest in lines[0] and "Traceback" not in err


def test_a_registry_reference_needs_no_engine_and_nothing_unchecked_is_clean(registry, tmp_path, monkeypatch):
    import imagebuild.engine
    import imagebuild.pipeline.auditing as auditing
    from imagebuild.audit.debian import SecurityIndexes
    from imagebuild.errors import EngineUnavailable

    def no_engine(purpose):
        raise EngineUnavailable("no engine here")

    def down(url, timeout):
        raise OSError("offline")

    _, digest = _pushed(registry)
    monkeypatch.setattr(imagebuild.engine, "connect", no_engine)
    monkeypatch.setattr(auditing, "SecurityIndexes", lambda t: SecurityIndexes(t, fetch=down, cache=tmp_path))
    monkeypatch.delenv("IMAGEBUILD_OSV_DB", raising=False)
    run = auditing.audit_images([f"{HOST}/{REPO}:runtime"], None, str(tmp_path), None, False, lambda m: None)
    (doc,) = run.json
    assert run.exit_code == 3 and doc["image_id"] == digest and doc["findings"] == []
    assert [s["state"] for s in doc["sources"]] == [NOT_CHECKED] * 3  # sbom unverified, suite offline, no OSV
    with pytest.raises(EngineUnavailable):  # a local name still needs the engine
        auditing.audit_images(["img:1"], None, str(tmp_path), None, False, lambda m: None)


def test_a_verify_key_with_only_local_images_is_one_error_line(tmp_path):
    """--verify-key checks a pushed image: given for a local image only, it would check nothing and must not be
    taken as verified."""
    import subprocess

    key = tmp_path / "cosign.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n")
    out = subprocess.run([sys.executable, "-m", "imagebuild", "audit", "--image", "pytorch:local", "--verify-key",
                          str(key)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    [line] = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert "--verify-key" in line and "docker://" in line
