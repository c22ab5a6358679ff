"""Sign only what was checked, and many signers (issue 39, items 2 and 3), without cosign or a registry: an index is
signed only over members that are the platform they are listed as and were pushed in this run or are vouched for by
the signing key; verify checks each member's platform and refuses a platform listed twice; a second key's signature
and attestations go beside the first's (no `--replace`), the same key's are not added twice; private key files
readable by others are refused; `push --dry-run` opens the key."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest
from _push_fakes import REG, add, fake_engine, fake_registry, make_image
from click.testing import CliRunner

from imagebuild.errors import ImagebuildError, UsageError
from imagebuild.models import Plan
from imagebuild.oci import RegistryAuth
from imagebuild.oci.platform import normalized, platform_mismatch
from imagebuild.push import push_plan
from imagebuild.sign import SigningKey
from imagebuild.sign.cosign import CosignResult, Registry
from imagebuild.sign.signer import PREDICATE_TYPES, sign_digest, vouch

ARM = "linux/arm64"
AMD_ID, ARM_ID = "sha256:" + "a" * 64, "sha256:" + "b" * 64
PRIV = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJr\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
PUB_PEM = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"


def _arm(img):
    variant = dataclasses.replace(img.variant, platform=ARM)
    suffix = f"-{img.flavor}"
    return dataclasses.replace(img, id=img.id.replace(suffix, f"-arm64{suffix}"), variant=variant,
                               tag=img.tag.removesuffix(suffix) + f"-arm64{suffix}",
                               aliases=tuple(a.removesuffix(suffix) + f"-arm64{suffix}" for a in img.aliases),
                               inputs_hash=img.inputs_hash + "-arm64")


@pytest.fixture
def pair(monkeypatch):
    reg = fake_registry()
    api = fake_engine(reg)
    monkeypatch.setattr("imagebuild.push.pusher.RegistryClient", lambda *a, **k: reg)
    amd = make_image(flavor="base", aliases=("2.9-cuda12.8-base",))
    arm = _arm(amd)
    add(api, amd.tag, image_id=AMD_ID)
    add(api, arm.tag, image_id=ARM_ID)
    reg.platforms[ARM_ID] = ARM
    return reg, api, amd, arm


def _push(reg, api, plan, **kw):
    logs: list[str] = []
    results = push_plan(plan, client=api, auth_for=lambda r: RegistryAuth(r, "u", "pw-1"), require_tests=False,
                        sleep=lambda s: None, make_copier=lambda store: reg.copier(), log=logs.append, **kw)
    return {r.tag: r.push for r in results}, logs


def _stranger(reg, arch: str) -> str:
    """An image anyone pushed (its config says `arch`) under the arm64 image's own tag."""
    return reg.put_blob(json.dumps({"os": "linux", "architecture": arch, "stranger": True}).encode())


def _put_under(reg, tag: str, config: str) -> str:
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"digest": config, "size": 10}, "layers": []}).encode()
    return reg.put_manifest("pytorch", tag, body, "application/vnd.oci.image.manifest.v1+json")


# -- platforms -----------------------------------------------------------------------------------------------------

def test_platforms_compare_as_containerd_normalises_them():
    assert normalized("linux/arm64/v8") == normalized("linux/aarch64") == normalized("linux/arm64") == "linux/arm64"
    assert normalized("linux/x86_64") == normalized("linux/amd64/v1") == "linux/amd64"
    assert normalized("linux/arm/v7") == normalized("linux/arm")
    assert normalized("linux/arm/v6") != normalized("linux/arm") and normalized("linux/amd64") != "linux/arm64"


def test_a_member_is_the_platform_its_config_says():
    reg = fake_registry()
    amd = _put_under(reg, "x", _stranger(reg, "amd64"))
    assert platform_mismatch(reg, "pytorch", amd, "linux/amd64", "x") is None
    assert "says linux/amd64, not linux/arm64" in platform_mismatch(reg, "pytorch", amd, ARM, "x")
    bare = _put_under(reg, "y", reg.put_blob(b'{"config": {}}'))
    assert "names no os/architecture" in platform_mismatch(reg, "pytorch", bare, "linux/amd64", "y")


# -- push: sign only what was checked ------------------------------------------------------------------------------

def test_only_one_platform_over_an_unsigned_stranger_signs_nothing_and_moves_no_tag(pair):
    reg, api, amd, arm = pair
    stranger = _put_under(reg, arm.short_tag, _stranger(reg, "arm64"))
    before = dict(reg.tags)
    asked: list[str] = []
    signed: list[str] = []

    def refuse(ref):
        asked.append(ref)
        raise ImagebuildError(f"{ref.split('@')[1]} is unsigned (key cosign.key): no signatures found")

    pushes, logs = _push(reg, api, Plan("m.yaml", [amd, arm]), images=[amd], vouch=refuse,
                         sign_pushed=lambda image, ref: {"key": "k"},
                         sign_index=lambda ref: signed.append(ref) or {"key": "k"})
    index = pushes[amd.tag]["index"]
    assert pushes[amd.tag]["status"] == "failed" and index["status"] == "failed"
    assert asked == [f"{REG}/pytorch@{stranger}"]  # the member this run pushed is not asked about
    assert "was not pushed in this run and is not signed by the signing key" in index["error"]
    assert "linux/arm64" in index["error"] and "\n" not in index["error"]
    assert signed == [] and index["digest"] not in reg.manifests  # nothing signed, the index not even written
    assert {k: v for k, v in reg.tags.items() if k in before} == before
    assert (("pytorch", amd.short_tag)) not in reg.tags  # the plain tag names nothing new
    assert sum(1 for m in logs if m.startswith("error: ")) == 1


def test_a_member_of_another_architecture_is_refused_even_without_signing(pair):
    reg, api, amd, arm = pair
    _put_under(reg, arm.short_tag, _stranger(reg, "amd64"))  # an amd64 image under the arm64 tag
    pushes, logs = _push(reg, api, Plan("m.yaml", [amd, arm]), images=[amd])
    index = pushes[amd.tag]["index"]
    assert index["status"] == "failed" and "says linux/amd64, not linux/arm64" in index["error"]
    assert index["digest"] not in reg.manifests and ("pytorch", amd.short_tag) not in reg.tags
    # an image built for the wrong platform in this run is refused the same way
    reg.platforms[ARM_ID] = "linux/amd64"
    pushes, _ = _push(reg, api, Plan("m.yaml", [amd, arm]))
    assert "is not the linux/arm64 image the index would list it as" in pushes[amd.tag]["index"]["error"]


def test_only_one_platform_over_a_member_the_key_signed_publishes_the_index(pair):
    reg, api, amd, arm = pair
    first, _ = _push(reg, api, Plan("m.yaml", [amd, arm]))  # both platforms pushed (and signed) in one run
    arm_digest = first[arm.tag]["digest"]
    asked: list[str] = []
    pushes, _ = _push(reg, api, Plan("m.yaml", [amd, arm]), images=[amd], vouch=asked.append,
                      sign_pushed=lambda image, ref: {"key": "k"}, sign_index=lambda ref: {"key": "k"})
    index = pushes[amd.tag]["index"]
    assert index["status"] == "unchanged" and index["signed"] == {"key": "k"}, index
    assert asked == [f"{REG}/pytorch@{arm_digest}"]
    # without a key nothing is vouched for (nothing is signed): the platform check alone
    pushes, _ = _push(reg, api, Plan("m.yaml", [amd, arm]), images=[amd], vouch=lambda ref: 1 / 0)
    assert pushes[amd.tag]["index"]["status"] == "unchanged"


# -- verify: every member of an index -------------------------------------------------------------------------------

def _index(reg, members: list[tuple[str, str]]) -> str:
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d,
                                      "size": 1, "platform": {"os": "linux", "architecture": a}}
                                     for a, d in members]}).encode()
    return reg.put_manifest("ml/pytorch", "2.9-base", body)


def _cosign_all_good(args, **_kw):
    digest = args[-1].split("@", 1)[1]
    if args[0] == "verify":
        return CosignResult(0, json.dumps([{"critical": {"image": {"docker-manifest-digest": digest}}}]), "")
    kind = args[args.index("--type") + 1]
    st = {"predicateType": PREDICATE_TYPES[kind], "subject": [{"digest": {"sha256": digest.split(":")[1]}}],
          "predicate": {"kind": kind, "digest": digest}}
    return CosignResult(0, json.dumps({"payload": base64.b64encode(json.dumps(st).encode()).decode()}), "")


def test_verify_refuses_a_member_of_another_platform_and_a_platform_listed_twice(monkeypatch):
    from _fake_registry import FakeRegistry

    from imagebuild.sign import verify as verify_mod
    from imagebuild.sign.keys import PublicKey

    monkeypatch.setattr(verify_mod, "run_cosign", _cosign_all_good)
    reg = FakeRegistry("reg.example:5000")
    amd = reg.put_manifest("ml/pytorch", None, json.dumps({
        "schemaVersion": 2, "config": {"digest": _stranger(reg, "amd64"), "size": 1}, "layers": []}).encode())
    arm = reg.put_manifest("ml/pytorch", None, json.dumps({
        "schemaVersion": 2, "config": {"digest": _stranger(reg, "arm64"), "size": 1}, "layers": []}).encode())
    key, cosign = PublicKey("cosign.pub"), Registry("reg.example:5000")
    ref = "reg.example:5000/ml/pytorch:2.9-base"
    _index(reg, [("amd64", amd), ("arm64", arm)])
    got = verify_mod.verify_reference(ref, key, cosign, reg)
    assert set(got.member_statements) == {"linux/amd64", "linux/arm64"} and got.statements == {}
    assert got.member_statements[ARM]["cyclonedx"]["predicate"]["digest"] == arm
    _index(reg, [("amd64", amd), ("arm64", amd)])  # the amd64 image listed as arm64 too
    with pytest.raises(verify_mod.VerifyError, match=r"\(linux/arm64\): .* is listed as linux/arm64, but its image "
                                                     r"config says linux/amd64"):
        verify_mod.verify_reference(ref, key, cosign, reg)
    _index(reg, [("amd64", amd), ("amd64", arm)])
    with pytest.raises(verify_mod.VerifyError, match="lists linux/amd64 twice"):
        verify_mod.verify_reference(ref, key, cosign, reg)


def test_verify_json_reports_each_member(monkeypatch, tmp_path):
    from imagebuild.commands.verify import command
    from imagebuild.sign.verify import Verified

    digest, amd, arm = ("sha256:" + c * 64 for c in "123")
    st = {k: {"predicateType": v, "predicate": {"specVersion": "1.6"}} for k, v in PREDICATE_TYPES.items()}
    verified = Verified("r/x:1", f"r/x@{digest}", digest, "x", {}, {"linux/amd64": amd, ARM: arm},
                        {"linux/amd64": st, ARM: st})
    monkeypatch.setattr("imagebuild.sign.verify.check_image", lambda *a, **k: verified)
    (tmp_path / "cosign.pub").write_text(PUB_PEM)
    out = CliRunner().invoke(command, ["r/x:1", "--key", str(tmp_path / "cosign.pub"), "--json"],
                             standalone_mode=False)
    assert out.exception is None, out.output
    doc = json.loads(out.output)
    assert [(m["platform"], m["verified"]) for m in doc["members"]] == [("linux/amd64", f"r/x@{amd}"),
                                                                        (ARM, f"r/x@{arm}")]
    assert set(doc["members"][1]["attestations"]) == set(PREDICATE_TYPES)
    text = CliRunner().invoke(command, ["r/x:1", "--key", str(tmp_path / "cosign.pub")], standalone_mode=False)
    assert "each of its 2 platform images verified" in text.output and f"  {ARM}: r/x@{arm}" in text.output


# -- many signers ----------------------------------------------------------------------------------------------------

class FakeCosign:
    """cosign over one digest's signatures and attestations, each (key, ...): verify answers for the key asked."""

    def __init__(self):
        self.sigs: list[str] = []  # key per signature
        self.atts: list[tuple[str, str]] = []  # (key, type)
        self.calls: list[list[str]] = []

    def __call__(self, args, password=None, registry=None, **_kw):
        self.calls.append(list(args))
        key = Path(args[args.index("--key") + 1])
        who = key.read_text() if key.suffix == ".pub" else key.stem  # a public half: the PEM names its key
        digest = args[-1].split("@", 1)[1]
        if args[0] == "sign":
            self.sigs.append(who)
        elif args[0] == "attest":
            self.atts.append((who, args[args.index("--type") + 1]))
        elif args[0] == "verify":
            if who not in self.sigs:
                return CosignResult(1, "", "Error: no matching signatures: invalid signature")
            return CosignResult(0, json.dumps([{"critical": {"image": {"docker-manifest-digest": digest}}}]), "")
        elif args[0] == "verify-attestation":
            kind = args[args.index("--type") + 1]
            if (who, kind) not in self.atts:
                return CosignResult(1, "", "Error: none of the attestations matched the predicate type")
            return _cosign_all_good(args)
        return CosignResult(0, "", "")


def test_a_second_key_adds_beside_the_first_and_the_same_key_adds_nothing(monkeypatch):
    cosign = FakeCosign()
    monkeypatch.setattr("imagebuild.sign.signer.run_cosign", cosign)
    monkeypatch.setattr("imagebuild.sign.verify.run_cosign", cosign)
    ref, reg = f"{REG}/pytorch@sha256:{'c' * 64}", Registry(REG)

    def sign(name):
        key = SigningKey(f"/keys/{name}.key", "pw")
        return sign_digest(ref, key, reg, sbom={"bomFormat": "CycloneDX"}, provenance={}, public_key_pem=name)

    first = sign("A")
    assert not first.already and cosign.sigs == ["A"] and cosign.atts == [("A", "cyclonedx"), ("A", "slsaprovenance1")]
    second = sign("B")
    assert not second.already and cosign.sigs == ["A", "B"] and len(cosign.atts) == 4
    assert not any("--replace" in call for call in cosign.calls)  # never drops another key's attestations
    again = sign("A")
    assert again.already and again.as_record()["attested_before"] == ["cyclonedx", "slsaprovenance1"]
    assert cosign.sigs == ["A", "B"] and len(cosign.atts) == 4  # nothing piled up
    # a member the key vouches for, and one it does not
    vouch(ref, SigningKey("/keys/A.key", "pw"), reg, "A")
    with pytest.raises(ImagebuildError, match="is signed by another key|not verified|unsigned"):
        vouch(ref, SigningKey("/keys/C.key", "pw"), reg, "C")


# -- key files ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,who", [(0o644, "every user may read"), (0o640, "its group may read"),
                                      (0o660, "its group may read and change"), (0o602, "every user may change")])
def test_a_private_key_others_may_read_is_refused(tmp_path, mode, who):
    key = tmp_path / "cosign.key"
    key.write_text(PRIV)
    key.chmod(mode)
    with pytest.raises(UsageError) as exc:
        SigningKey.from_option(str(key), "pw-1")
    text = str(exc.value)
    assert f"permissions {mode:04o}: {who} this private key" in text and f"chmod 600 {key}" in text
    assert "\n" not in text and "pw-1" not in text
    key.chmod(0o600)
    assert SigningKey.from_option(str(key), "pw-1").ref == str(key)
    key.chmod(0o400)
    assert SigningKey.from_option(str(key), "pw-1").ref == str(key)


def test_push_dry_run_opens_the_key_with_its_password(monkeypatch, tmp_path):
    from imagebuild.commands.push import command

    img = make_image()
    reg = fake_registry()
    api = fake_engine(reg)
    add(api, img.tag, image_id=AMD_ID)
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: x\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.resolve_matrix_path", lambda m: matrix)
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: Plan("m.yaml", [img]))
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: api)
    key = tmp_path / "cosign.key"
    key.write_text(PRIV)
    key.chmod(0o600)
    refusal = CosignResult(1, "", "Error: decrypt: encrypted: decryption failed")
    monkeypatch.setattr("imagebuild.sign.keys.run_cosign", lambda *a, **k: refusal)
    monkeypatch.setenv("COSIGN_PASSWORD", "wrong-pw-1")
    args = ["-m", "m.yaml", "--dry-run", "--untested", "--sign-key", str(key), "--state-dir", str(tmp_path / "s"),
            "--report-dir", str(tmp_path / "report")]
    out = CliRunner().invoke(command, args, standalone_mode=False)
    assert isinstance(out.exception, UsageError) and "wrong password" in str(out.exception)
    assert "wrong-pw-1" not in str(out.exception) and "dry run" not in out.output
    monkeypatch.setattr("imagebuild.sign.keys.run_cosign", lambda *a, **k: CosignResult(0, PUB_PEM, ""))
    out = CliRunner().invoke(command, args, standalone_mode=False)
    assert out.exception is None, out.output
    assert f"dry run: would sign with {key}" in out.output and reg.sends == []
