"""Signing without cosign or a registry: the SLSA provenance made from the record (values, no secrets), the key
checks made before anything is pushed, push's sign seam (called once per image between the write by digest and
the tags; a refusal moves no tag), how cosign's refusals are told, and the signing/verify options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _push_fakes import D2, REG, add, fake_engine, fake_registry, make_image
from _support import chain, plan_of
from click.testing import CliRunner

from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.lock.model import BaseLock, Lock, LockedImage, PipPin
from imagebuild.models import BaseSource
from imagebuild.oci import RegistryAuth
from imagebuild.plan.tags import references
from imagebuild.push import Pusher
from imagebuild.record.store import ImageRecord, Record
from imagebuild.secrets import register_secret
from imagebuild.sign import PublicKey, SigningKey, configured_public_key, is_kms, make_provenance
from imagebuild.sign.cosign import CosignResult, Registry
from imagebuild.sign.verify import _attestation_problem, _json_lines, _statement, _unsigned_or_other_key

PUB = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
PRIV = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJr\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
DIGEST = "sha256:" + "ab" * 32


def _private_key(path: Path, mode: int = 0o600) -> Path:
    """A private key file as cosign generate-key-pair writes it: readable by its owner only."""
    path.write_text(PRIV)
    path.chmod(mode)
    return path


# -- provenance --------------------------------------------------------------------------------------------------

def _provenance_case(index_password: str = "idx-pass-1234"):
    register_secret(index_password)
    base, runtime, dev = chain("2.13.0-cpu-py3.11-debian12", repo=f"{REG}/ml/pytorch")
    plan = plan_of([base, runtime, dev])
    plan.lock_file = "images/cpu.lock"
    inputs = BuildInputs(pip_index_url=f"https://ci:{index_password}@pypi.corp/simple", torch_index_url="none")
    record = Record(matrix="images/cpu.yaml", matrix_digest="sha256:" + "a" * 64, inputs=inputs.public(),
                    registry=f"{REG}/ml")
    record.images[base.id] = ImageRecord(id=base.id, flavor="base", inputs_hash=base.inputs_hash,
                                         image_id="sha256:" + "b" * 64,
                                         pushes={base.repository: {"digest": "sha256:" + "c" * 64,
                                                                   "image_id": "sha256:" + "b" * 64}})
    record.images[runtime.id] = ImageRecord(id=runtime.id, flavor="runtime", inputs_hash=runtime.inputs_hash,
                                            image_id="sha256:" + "d" * 64, built_at="2026-12-02T05:00:00Z")
    lock = Lock("cpu.yaml", {
        base.id: LockedImage(base.id, "debian12", "3.11", "manylinux_2_36_x86_64", (),
                             base=BaseLock("registry", ref="example/os:1", digest="sha256:" + "e" * 64)),
        runtime.id: LockedImage(runtime.id, "debian12", "3.11", "manylinux_2_36_x86_64", ("torch==2.13.0",),
                                pip=(PipPin("torch", "2.13.0+cpu", "f" * 64, "torch-2.13.0+cpu-cp311.whl"),
                                     PipPin("numpy", "2.3.0", "9" * 64, "numpy-2.3.0-cp311.whl"))),
        dev.id: LockedImage(dev.id, "debian12", "3.11", "manylinux_2_36_x86_64", ("ipython",),
                            pip=(PipPin("ipython", "9.0.0", "8" * 64, "ipython-9.0.0-py3.whl"),)),
    })
    return plan, base, runtime, dev, record, lock


def test_provenance_names_matrix_inputs_parent_and_every_locked_pip_file():
    plan, _base, runtime, dev, record, lock = _provenance_case()
    pred = make_provenance(plan, runtime, record, lock, DIGEST, sbom_sha256="sha256:" + "7" * 64,
                           lock_sha256="sha256:" + "6" * 64)
    build = pred["buildDefinition"]
    assert build["buildType"].startswith("https://")
    ext = build["externalParameters"]
    assert ext["matrix"] == {"path": "images/cpu.yaml", "digest": {"sha256": "a" * 64}}
    assert ext["image"]["tag"] == runtime.tag and ext["image"]["flavor"] == "runtime"
    assert ext["inputs"]["torch_index_url"] == "none"
    assert build["internalParameters"]["inputsHash"] == runtime.inputs_hash
    deps = {d["name"]: d for d in build["resolvedDependencies"]}
    assert deps["matrix"]["digest"] == {"sha256": "a" * 64}
    assert deps["lock"] == {"name": "lock", "uri": "file:images/cpu.lock", "digest": {"sha256": "6" * 64}}
    # the parent by the digest it was pushed as
    assert deps["parent"]["uri"] == f"oci://{REG}/ml/pytorch@sha256:{'c' * 64}"
    assert deps["parent"]["digest"] == {"sha256": "c" * 64}
    assert deps["torch-2.13.0+cpu-cp311.whl"] == {"name": "torch-2.13.0+cpu-cp311.whl",
                                                  "uri": "pkg:pypi/torch@2.13.0+cpu", "digest": {"sha256": "f" * 64}}
    assert "ipython-9.0.0-py3.whl" not in deps  # dev's own file: not in the runtime
    meta = pred["runDetails"]["metadata"]
    assert meta["invocationId"] == f"{runtime.id}@{DIGEST}" and meta["finishedOn"] == "2026-12-02T05:00:00Z"
    products = {p["name"]: p for p in pred["runDetails"]["byproducts"]}
    assert products["sbom"]["digest"] == {"sha256": "7" * 64}
    assert products["image-config"]["digest"] == {"sha256": "d" * 64}
    # dev: its own files and its parents' (what the image holds); a parent never pushed is named by its tag
    dev_deps = {d["name"]: d for d in make_provenance(plan, dev, record, lock, DIGEST)["buildDefinition"][
        "resolvedDependencies"]}
    assert {"ipython-9.0.0-py3.whl", "torch-2.13.0+cpu-cp311.whl", "numpy-2.3.0-cp311.whl"} <= set(dev_deps)
    assert dev_deps["parent"]["uri"] == f"oci://{runtime.tag}" and "digest" not in dev_deps["parent"]


def test_provenance_of_a_base_names_the_os_image_by_digest_or_bootstrap():
    plan, base, _rt, _dev, record, lock = _provenance_case()
    deps = {d["name"]: d for d in make_provenance(plan, base, record, lock, DIGEST)["buildDefinition"][
        "resolvedDependencies"]}
    assert deps["base-image"]["digest"] == {"sha256": "e" * 64}  # the lock's digest of the OS image
    boot = chain("2.13.0-cpu-py3.11-debian12", flavors=("base",))[0]
    boot = boot.__class__(**{**boot.__dict__, "variant": boot.variant.__class__(
        **{**boot.variant.__dict__, "base": BaseSource("bootstrap", snapshot="20261101T000000Z")})})
    dep = next(d for d in make_provenance(plan_of([boot]), boot, None, None, DIGEST)["buildDefinition"][
        "resolvedDependencies"] if d["name"] == "base-image")
    assert dep["uri"] == "bootstrap:http://deb.debian.org/debian?suite=bookworm"
    assert dep["annotations"]["snapshot"] == "20261101T000000Z" and "digest" not in dep


def test_provenance_carries_no_credential():
    plan, _b, runtime, _d, record, lock = _provenance_case("idx-pass-5678")
    record.inputs["pip_extra_index_urls"] = ["https://u:raw-secret-9@extra.corp/simple"]  # even unmasked in
    text = json.dumps(make_provenance(plan, runtime, record, lock, DIGEST))
    assert "idx-pass-5678" not in text and "raw-secret-9" not in text
    assert "https://ci:***@pypi.corp/simple" in text


def test_provenance_is_the_same_for_the_same_inputs():
    plan, _b, runtime, _d, record, lock = _provenance_case()
    assert make_provenance(plan, runtime, record, lock, DIGEST) == make_provenance(plan, runtime, record, lock,
                                                                                   DIGEST)


# -- keys --------------------------------------------------------------------------------------------------------

def test_signing_key_checks_the_file_before_cosign_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("COSIGN_PASSWORD", "env-pw-123")
    with pytest.raises(UsageError, match="nope.key: no such file"):
        SigningKey.from_option(str(tmp_path / "nope.key"), None)
    (tmp_path / "cosign.pub").write_text(PUB)
    with pytest.raises(UsageError, match="a public key; signing needs the private key"):
        SigningKey.from_option(str(tmp_path / "cosign.pub"), None)
    (tmp_path / "junk.key").write_text("hello\n")
    with pytest.raises(UsageError, match="not a cosign private key"):
        SigningKey.from_option(str(tmp_path / "junk.key"), None)
    with pytest.raises(UsageError, match="a folder"):
        SigningKey.from_option(str(tmp_path), None)
    _private_key(tmp_path / "cosign.key")
    key = SigningKey.from_option(str(tmp_path / "cosign.key"), None)
    assert key.password == "env-pw-123" and key.ref == str(tmp_path / "cosign.key")
    assert "env-pw-123" not in repr(key)
    assert SigningKey.from_option(str(tmp_path / "cosign.key"), "stdin-pw-1").password == "stdin-pw-1"


def test_kms_uris_go_to_cosign_as_they_are(monkeypatch):
    assert is_kms("awskms:///arn:aws:kms:us-east-1:1:key/x") and is_kms("hashivault://transit-key")
    assert is_kms("pkcs11:token=x;slot-id=0") and not is_kms("/keys/cosign.key") and not is_kms("cosign.key")
    assert SigningKey.from_option("gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k", None).ref.startswith(
        "gcpkms://")
    assert PublicKey.from_option("awskms:///alias/sign").ref == "awskms:///alias/sign"


def test_wrong_password_is_bad_input_naming_the_key(tmp_path, monkeypatch):
    _private_key(tmp_path / "cosign.key")
    key = SigningKey.from_option(str(tmp_path / "cosign.key"), "wrong-pw-1")
    refusal = CosignResult(1, "", "Error: decrypt: encrypted: decryption failed\nerror during command execution: "
                                  "decrypt: encrypted: decryption failed\n")
    monkeypatch.setattr("imagebuild.sign.keys.run_cosign", lambda *a, **k: refusal)
    with pytest.raises(UsageError) as exc:
        key.public_key()
    assert "cosign.key: wrong password" in str(exc.value) and "\n" not in str(exc.value)
    assert "wrong-pw-1" not in str(exc.value)


def test_public_key_option_and_environment(tmp_path, monkeypatch):
    (tmp_path / "cosign.pub").write_text(PUB)
    _private_key(tmp_path / "cosign.key")
    monkeypatch.delenv("IMAGEBUILD_VERIFY_KEY", raising=False)
    assert configured_public_key(None) is None
    monkeypatch.setenv("IMAGEBUILD_VERIFY_KEY", str(tmp_path / "cosign.pub"))
    assert configured_public_key(None).source == "IMAGEBUILD_VERIFY_KEY"
    assert configured_public_key(str(tmp_path / "cosign.pub")).source == "--verify-key"
    with pytest.raises(UsageError, match="a private key; verifying needs the public key"):
        configured_public_key(str(tmp_path / "cosign.key"))
    monkeypatch.setenv("IMAGEBUILD_VERIFY_KEY", str(tmp_path / "gone.pub"))
    with pytest.raises(UsageError, match="IMAGEBUILD_VERIFY_KEY .*gone.pub: no such file"):
        configured_public_key(None)


def test_cosign_reaches_a_loopback_registry_over_http_and_gets_the_ca():
    assert Registry("127.0.0.1:5000", allow_http=True).flags() == ["--allow-http-registry"]
    assert Registry("reg.corp", ca_file="/ca.pem").flags() == ["--registry-cacert", "/ca.pem"]


# -- how cosign's refusals are told --------------------------------------------------------------------------------

def test_refusals_in_words():
    assert _unsigned_or_other_key("no signatures found") == "unsigned"
    assert _unsigned_or_other_key("no matching signatures: invalid signature when validating ASN.1 encoded "
                                  "signature") == "signed by another key"
    assert _attestation_problem("no matching attestations: no matching subject digest found") == \
        "made for another digest, not this image"
    assert _attestation_problem("none of the attestations matched the predicate type: cyclonedx") == "missing"
    assert _attestation_problem("no matching attestations: invalid signature when validating ASN.1 encoded "
                                "signature") == "signed by another key"


def test_statements_are_read_from_cosigns_envelopes():
    import base64

    statement = {"predicateType": "https://slsa.dev/provenance/v1", "subject": [{"digest": {"sha256": "ab" * 32}}]}
    line = json.dumps({"payloadType": "application/vnd.in-toto+json",
                       "payload": base64.b64encode(json.dumps(statement).encode()).decode()})
    envelopes = _json_lines("WARNING: skipping tlog\n" + line + "\n")
    assert [_statement(e) for e in envelopes] == [statement]
    assert _statement({"payload": "%%%"}) == {}
    assert _json_lines('[{"critical": {}}]') == [{"critical": {}}]


# -- push's sign seam --------------------------------------------------------------------------------------------

def _pusher(sign_pushed):
    reg = fake_registry()
    api = fake_engine(reg)
    auth = RegistryAuth(REG, "alice", "pw-secret-1", source="options")
    logs: list[str] = []
    return Pusher(api, auth, registry_client=reg, sleep=lambda s: None, log=logs.append, copier=reg.copier(),
                  sign_pushed=sign_pushed), api, reg, logs


def test_each_image_is_signed_by_digest_before_any_tag_names_it():
    img = make_image(aliases=("2.9-cuda12.8-runtime",))
    seen: list[tuple[str, dict]] = []

    def sign(image, digest_ref):
        seen.append((digest_ref, dict(reg.tags)))
        return {"key": "/k/cosign.key", "attestations": ["cyclonedx", "slsaprovenance1"]}

    pusher, api, reg, logs = _pusher(sign)
    add(api, img.tag)
    rec = pusher.push_image(img, references(img))
    assert rec["status"] == "pushed" and rec["signed"]["key"] == "/k/cosign.key"
    assert seen == [(f"{REG}/pytorch@{rec['digest']}", {})]  # written by digest, no tag yet
    assert reg.tags[("pytorch", img.short_tag)] == rec["digest"] == reg.tags[("pytorch", "2.9-cuda12.8-runtime")]
    assert any("signed" in m for m in logs)


def test_a_refused_signature_moves_no_tag():
    img = make_image(aliases=("2.9-cuda12.8-runtime",))

    def refuse(image, digest_ref):
        raise UsageError(f"{digest_ref}: not signed: PUT sha256-x.sig: HTTP 403 denied")

    pusher, api, reg, _ = _pusher(refuse)
    add(api, img.tag)
    reg.tags[("pytorch", img.short_tag)] = D2  # the tag's previous image stays named
    rec = pusher.push_image(img, references(img))
    assert rec["status"] == "failed"
    assert "not signed" in rec["error"] and "no tag was moved" in rec["error"]
    assert reg.tags == {("pytorch", img.short_tag): D2}


def test_an_unchanged_image_is_signed_again_and_keeps_its_tags():
    img = make_image()
    signed: list[str] = []
    pusher, api, reg, _ = _pusher(lambda image, ref: signed.append(ref) or {"key": "k"})
    add(api, img.tag)
    assert pusher.push_image(img)["status"] == "pushed"
    again = pusher.push_image(img)
    assert again["status"] == "unchanged" and again["signed"] == {"key": "k"} and len(signed) == 2
    assert len(reg.sends) == 1  # nothing written the second time


def test_no_key_no_signing():
    img = make_image()
    pusher, api, _reg, _ = _pusher(None)
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "pushed" and "signed" not in rec


# -- options -----------------------------------------------------------------------------------------------------

def _invoke(command, args, stdin=None):
    return CliRunner().invoke(command, args, input=stdin, standalone_mode=False)


def test_signing_options_are_checked_before_anything_runs(tmp_path):
    from imagebuild.commands.build import command as build
    from imagebuild.commands.push import command as push

    r = _invoke(push, ["--matrix", "x.yaml", "--sign-password-stdin"], "pw\n")
    assert isinstance(r.exception, UsageError) and "--sign-password-stdin needs --sign-key" in str(r.exception)
    r = _invoke(push, ["--matrix", "x.yaml", "-u", "me", "--password-stdin", "--sign-key", "k.key",
                       "--sign-password-stdin"], "pw\n")
    assert isinstance(r.exception, UsageError) and "both read standard input" in str(r.exception)
    r = _invoke(push, ["--matrix", "x.yaml", "--sign-key", "k.key", "--sign-password-stdin"], "")
    assert isinstance(r.exception, UsageError) and "nothing on standard input" in str(r.exception)
    r = _invoke(build, ["--matrix", "x.yaml", "--sign-key", "k.key"])
    assert isinstance(r.exception, UsageError) and "add --push" in str(r.exception)


def test_verify_needs_a_key(monkeypatch, tmp_path):
    from imagebuild.commands.verify import command as verify

    monkeypatch.delenv("IMAGEBUILD_VERIFY_KEY", raising=False)
    r = _invoke(verify, ["127.0.0.1:5000/ml/x:1"])
    assert isinstance(r.exception, UsageError) and "give --key" in str(r.exception)
    r = _invoke(verify, ["127.0.0.1:5000/ml/x:1", "--key", str(tmp_path / "none.pub")])
    assert isinstance(r.exception, UsageError) and "none.pub: no such file" in str(r.exception)


def test_a_local_name_cannot_be_verified(tmp_path):
    from imagebuild.sign.verify import VerifyError, check_image

    (tmp_path / "cosign.pub").write_text(PUB)
    key = PublicKey.from_option(str(tmp_path / "cosign.pub"))
    for name in ("pytorch:2.9-runtime", "sha256:" + "1" * 64):
        with pytest.raises(VerifyError, match="no registry reference to verify"):
            check_image(name, key)


def test_slurm_refuses_a_bare_sqsh_when_a_verify_key_is_set(tmp_path, monkeypatch):
    from imagebuild.commands.slurm import command as slurm

    (tmp_path / "cosign.pub").write_text(PUB)
    # a recorded host tree (an empty folder is refused as a host root: it would read as a node without GPUs)
    monkeypatch.setenv("IMAGEBUILD_HOST_ROOT", str(Path(__file__).parent / "fixtures" / "hosts" / "h100-2s8g"))
    r = _invoke(slurm, ["--verify-key", str(tmp_path / "cosign.pub"), "--srun", "/lustre/x.sqsh"])
    assert r.exception is not None and "a .sqsh file carries no signature" in str(r.exception)
    assert "x.sqsh" in str(r.exception)


def test_the_sbom_attested_is_the_one_build_wrote_for_that_very_image(tmp_path):
    import hashlib

    from imagebuild.pipeline.loaded import RecordBook
    from imagebuild.pipeline.signing import _recorded_sbom

    img = make_image()
    text = '{"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}\n'
    path = tmp_path / "x.cdx.json"
    path.write_text(text)
    sha = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    record = Record("m.yaml", None, {}, None)
    record.images[img.id] = ImageRecord(id=img.id, flavor="runtime", inputs_hash=img.inputs_hash,
                                        sbom={"path": str(path), "sha256": sha, "image_id": "sha256:img1"})
    book = RecordBook(tmp_path / "m.yaml", None, record)
    assert _recorded_sbom(book, img, "sha256:img1") == (json.loads(text), sha)
    assert _recorded_sbom(book, img, "sha256:other") is None  # another image: its SBOM is read from it
    path.write_text(text.replace("1.6", "1.5"))
    assert _recorded_sbom(book, img, "sha256:img1") is None  # the file changed since build wrote it


def test_no_cosign_stops_the_push_naming_the_images(tmp_path, monkeypatch):
    from imagebuild.pipeline.settings import PushSettings
    from imagebuild.pipeline.signing import open_signing_key
    from imagebuild.sign import CosignMissing

    _private_key(tmp_path / "cosign.key")
    monkeypatch.setenv("IMAGEBUILD_COSIGN", str(tmp_path / "no-cosign"))
    images = [make_image(flavor="base"), make_image()]
    with pytest.raises(CosignMissing) as exc:
        open_signing_key(PushSettings(sign_key=str(tmp_path / "cosign.key"), sign_password="pw-12345"), images)
    text = str(exc.value)
    assert text.startswith(f"{images[0].tag} (and 1 more): not pushed: IMAGEBUILD_COSIGN=") and "pw-12345" not in text
    assert open_signing_key(PushSettings(), images) is None  # no key: no signing, cosign never asked


def test_opening_the_key_before_a_build_asks_cosign_its_key_only(tmp_path, monkeypatch):
    """open_signing_key (build --push's check before building, push --dry-run) says no cosign version: it runs
    `cosign public-key` and nothing else; the push's own KeyCheck asks the version beside it."""
    from imagebuild.pipeline import signing
    from imagebuild.pipeline.settings import PushSettings

    _private_key(tmp_path / "cosign.key")
    asked: list[str] = []
    monkeypatch.setattr(signing.SigningKey, "public_key", lambda self: asked.append("public-key") or "PUBLIC")
    monkeypatch.setattr(signing, "cosign_version", lambda: asked.append("version") or "v2.5.0")
    settings = PushSettings(sign_key=str(tmp_path / "cosign.key"), sign_password="pw-12345")
    opened = signing.open_signing_key(settings, [make_image()])
    assert opened is not None and opened[1] == "PUBLIC" and asked == ["public-key"]
    check = signing.KeyCheck.start(settings, [make_image()])
    assert check is not None and check.public() == "PUBLIC" and check.cosign_version() == "v2.5.0"
    assert sorted(asked) == ["public-key", "public-key", "version"]


# -- one tag, several platforms: verify follows the index --------------------------------------------------------

def _index_registry():
    """A fake registry whose plain tag names an OCI index of two signed platform images."""
    from _fake_registry import FakeRegistry

    reg = FakeRegistry("reg.example:5000")
    members = {}
    for arch, fill in (("amd64", "a1"), ("arm64", "b2")):
        config = reg.put_blob(json.dumps({"os": "linux", "architecture": arch, "fill": fill}).encode())
        body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"digest": config, "size": 2}, "layers": []}).encode()
        members[arch] = reg.put_manifest("ml/pytorch", None, body)
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d,
                                       "size": 1, "platform": {"os": "linux", "architecture": a}}
                                      for a, d in members.items()]}).encode()
    digest = reg.put_manifest("ml/pytorch", "2.9-base", index)
    return reg, digest, members


def _fake_cosign(unsigned: set[str]):
    """run_cosign as cosign answers for signatures/attestations of every digest but `unsigned`."""
    import base64

    from imagebuild.sign.cosign import CosignResult
    from imagebuild.sign.signer import PREDICATE_TYPES

    asked: list[list[str]] = []

    def run(args, **_kw):
        asked.append(list(args))
        digest = args[-1].split("@", 1)[1]
        if digest in unsigned:
            return CosignResult(1, "", "Error: no signatures found")
        if args[0] == "verify":
            return CosignResult(0, json.dumps([{"critical": {"image": {"docker-manifest-digest": digest}}}]), "")
        kind = args[args.index("--type") + 1]
        st = {"predicateType": PREDICATE_TYPES[kind], "subject": [{"digest": {"sha256": digest.split(":")[1]}}]}
        return CosignResult(0, json.dumps({"payload": base64.b64encode(json.dumps(st).encode()).decode()}), "")

    return run, asked


def test_verify_follows_an_index_to_every_platform_image(monkeypatch):
    from imagebuild.sign import verify as verify_mod
    from imagebuild.sign.cosign import Registry
    from imagebuild.sign.keys import PublicKey

    reg, index, members = _index_registry()
    run, asked = _fake_cosign(set())
    monkeypatch.setattr(verify_mod, "run_cosign", run)
    key = PublicKey("cosign.pub")
    got = verify_mod.verify_reference("reg.example:5000/ml/pytorch:2.9-base", key, Registry("reg.example:5000"), reg)
    assert got.digest == index and got.members == {"linux/amd64": members["amd64"], "linux/arm64": members["arm64"]}
    checked = {a[-1].split("@")[1] for a in asked}
    assert checked == {index, *members.values()}
    # the engine's arm64 image (its ID is that manifest's config digest) is the verified one
    arm_config = json.loads(reg.manifests[members["arm64"]])["config"]["digest"]
    assert verify_mod.local_image_matches({"Id": arm_config, "RepoDigests": []}, got, reg)
    assert not verify_mod.local_image_matches({"Id": "sha256:" + "99" * 32, "RepoDigests": []}, got, reg)
    # one platform image unsigned: the whole tag is refused, naming that platform
    run, _ = _fake_cosign({members["arm64"]})
    monkeypatch.setattr(verify_mod, "run_cosign", run)
    with pytest.raises(verify_mod.VerifyError, match=r"\(linux/arm64\).*is unsigned"):
        verify_mod.verify_reference("reg.example:5000/ml/pytorch:2.9-base", key, Registry("reg.example:5000"), reg)


class _Tags:
    """The registry client's one question here: which digest a tag names (None: no such tag)."""

    def __init__(self, tags: dict[str, str], fail: bool = False) -> None:
        self.tags, self.fail, self.asked = tags, fail, []

    def manifest_digest(self, repository: str, reference: str):
        self.asked.append(f"{repository}:{reference}")
        if self.fail:
            from imagebuild.oci import RegistryError

            raise RegistryError("reg.example:5000: HTTP 503")
        return self.tags.get(f"{repository}:{reference}")


@pytest.mark.parametrize("case", ["no signature of any key", "a signature there", "COSIGN_REPOSITORY",
                                  "the registry cannot say", "no client"])
def test_cosign_verifies_only_where_the_registry_holds_a_signature(monkeypatch, case):
    """A first push asks the registry (one request) whether the digest carries any signature before a cosign run
    asks whose it is: none there, no cosign run; anything else (one there, signatures kept elsewhere, no answer),
    cosign verifies as before."""
    from imagebuild.sign import signer

    run, asked = _fake_cosign(set())
    monkeypatch.setattr(signer, "run_cosign", run)
    monkeypatch.delenv("COSIGN_REPOSITORY", raising=False)
    sig = "ml/pytorch:" + DIGEST.replace(":", "-") + ".sig"
    client = _Tags({sig: "sha256:" + "cd" * 32} if case == "a signature there" else {},
                   fail=case == "the registry cannot say")
    if case == "COSIGN_REPOSITORY":
        monkeypatch.setenv("COSIGN_REPOSITORY", "reg.example:5000/signatures")
    registry = Registry("reg.example:5000", client=None if case == "no client" else client)  # type: ignore[arg-type]
    public = PublicKey("/k.pub", "--sign-key")
    signed = signer.already_signed(f"reg.example:5000/ml/pytorch@{DIGEST}", public, registry)
    if case == "no signature of any key":
        assert signed is False and asked == [] and client.asked == [sig]
        assert signer.already_attested(f"reg.example:5000/ml/pytorch@{DIGEST}", "cyclonedx", public, registry) is False
        assert asked == [] and client.asked[-1] == sig[:-3] + "att"
    else:
        assert signed is True and [a[0] for a in asked] == ["verify"]


def _signed_plan(sign, monkeypatch, reg=None):
    """push_plan of a base and its runtime (two image IDs) into the fake registry, signing with `sign`."""
    import imagebuild.push.pusher as pm
    from imagebuild.models import Plan
    from imagebuild.push import push_plan

    base = make_image(flavor="base")
    runtime = make_image(parent=base.tag)
    reg = reg or fake_registry()
    api = fake_engine(reg)
    add(api, base.tag, image_id="sha256:img1")
    add(api, runtime.tag, image_id="sha256:img2")
    monkeypatch.setattr(pm, "RegistryClient", lambda *a, **k: reg)
    results = push_plan(Plan("m.yaml", [base, runtime]), client=api, auth_for=lambda r: RegistryAuth(r, "u", "pw-12"),
                        require_tests=False, sleep=lambda s: None, make_copier=lambda store: reg.copier(),
                        sign_pushed=sign)
    return results, reg, base, runtime


def test_the_next_image_is_written_while_one_is_signed_and_tags_move_only_once_it_is(monkeypatch):
    """push_plan writes the runtime by digest while the base is being signed (the base's signing waits for the
    runtime's write, which never comes when the two run one after the other); neither image's tags move before its
    own signature is there."""
    import threading

    import _fake_registry

    reg = fake_registry()
    runtime_written = threading.Event()
    seen: dict[str, dict] = {}

    def sign(image, digest_ref):
        if image.flavor == "base":
            assert runtime_written.wait(10), "the runtime was not written while the base was signed"
        seen[image.flavor] = dict(reg.tags)
        return {"key": "k"}

    real_send = _fake_registry.FakeCopier.send

    def send(self, prepared, name, *a, **k):
        real_send(self, prepared, name, *a, **k)
        if len(self.registry.sends) == 2:  # the runtime's write: the base's signing may end
            runtime_written.set()

    monkeypatch.setattr(_fake_registry.FakeCopier, "send", send)
    results, reg, base, runtime = _signed_plan(sign, monkeypatch, reg)
    assert [r.push["status"] for r in results] == ["pushed", "pushed"], [r.push for r in results]
    assert all(r.push["signed"] == {"key": "k"} for r in results)
    digests = {r.flavor: r.push["digest"] for r in results}
    assert digests["base"] not in seen["base"].values()  # no tag named the base while it was signed
    assert digests["runtime"] not in seen["runtime"].values()
    assert reg.tags[("pytorch", base.short_tag)] == digests["base"]
    assert reg.tags[("pytorch", runtime.short_tag)] == digests["runtime"]


def test_a_refused_signature_leaves_that_images_tags_and_the_next_image_is_pushed(monkeypatch):
    def sign(image, digest_ref):
        if image.flavor == "base":
            raise UsageError(f"{digest_ref}: not signed: HTTP 403 denied")
        return {"key": "k"}

    results, reg, base, runtime = _signed_plan(sign, monkeypatch)
    assert [r.push["status"] for r in results] == ["failed", "pushed"]
    assert "not signed" in results[0].push["error"] and "no tag was moved" in results[0].push["error"]
    assert ("pytorch", base.short_tag) not in reg.tags
    assert reg.tags[("pytorch", runtime.short_tag)] == results[1].push["digest"]
