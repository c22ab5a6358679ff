"""Signed pushes with the REAL cosign (2.5, Debian trixie's, scripts/cosign.sh) against a real registry (Debian's
docker-registry with htpasswd auth) and the real engine: what push signs and attests, cosign's own `verify` and
`verify-attestation` accept; `imagebuild verify`, `run`, `export` and `slurm` refuse another key, a moved tag, an
attestation made for another digest; a wrong key password stops the push before anything moves; a registry that
refuses the signature leaves no tag on the unsigned digest. Private keys and passwords appear in no output.

Images are tiny `FROM scratch` chains (a few hundred KB); each cosign call takes about a second.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.models import Plan
from imagebuild.oci import Reference, RegistryClient
from imagebuild.pipeline.loaded import RecordBook
from imagebuild.pipeline.located import Located
from imagebuild.pipeline.pushing import push_step
from imagebuild.pipeline.settings import PushSettings
from imagebuild.push import Pusher
from imagebuild.sign import SigningKey, cosign_registry, sign_digest

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import PASSWORD, USER, Images, auth, cosign_key_pair, image_plan, imagebuild, ns  # noqa: E402
from faultproxy import Fault, FaultProxy  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
KEY_PASSWORD = "kp-" + secrets.token_hex(10)
OTHER_PASSWORD = "kq-" + secrets.token_hex(10)


@pytest.fixture(scope="module")
def keys(cosign, tmp_path_factory):
    """Two real cosign key pairs: `good` signs, `other` is someone else's."""
    folder = tmp_path_factory.mktemp("keys")
    for name, password in (("good", KEY_PASSWORD), ("other", OTHER_PASSWORD)):
        cosign_key_pair(cosign, folder / name, password)
    return folder


@pytest.fixture(scope="module")
def images(docker_client):
    imgs = Images(docker_client)
    yield imgs
    imgs.cleanup()


def _env(**extra: str) -> dict[str, str]:
    return {"IMAGEBUILD_REGISTRY_USER": USER, "IMAGEBUILD_REGISTRY_PASSWORD": PASSWORD, **extra}


def _digest_ref(registry: dict, tag: str) -> str:
    ref = Reference.parse(tag)
    digest = RegistryClient(auth(registry["REGISTRY"])).manifest_digest(ref.repository, ref.tag or "")
    assert digest
    return f"{ref.name}@{digest}"


def _one_error_line(res: subprocess.CompletedProcess[str], *words: str) -> str:
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def signed(docker_client, registry, images, keys, tmp_path_factory):
    """A base -> runtime -> dev chain pushed through the pipeline's push step with --sign-key (password given as
    --sign-password-stdin would), its record written; yields what the tests read."""
    tmp = tmp_path_factory.mktemp("signed")
    matrix = tmp / "signed.yaml"
    matrix.write_text("# the record's matrix file\n")
    state = tmp / "state"
    plans = images.chain(f"{registry['REGISTRY']}/{ns()}", sizes=(64 << 10, 32 << 10, 16 << 10))
    located = [(p, Located(docker_client.api.inspect_image(p.tag)["Id"])) for p in plans]
    book = RecordBook(matrix, str(state), None)
    settings = PushSettings(require_tests=False, username=USER, password=PASSWORD,
                            sign_key=str(keys / "good.key"), sign_password=KEY_PASSWORD)
    logs: list[str] = []
    run = push_step(docker_client, Plan(str(matrix), plans), located, book, settings, logs.append)
    statuses = [(r.push or {}).get("status") for r in run.results]
    assert statuses == ["pushed"] * 3, (run.results, logs)
    return {"plans": plans, "logs": logs, "record": state / "signed.state.json", "results": run.results}


def test_signed_push_is_accepted_by_cosign_and_by_imagebuild_verify(signed, registry, keys, cosign, tmp_path):
    base = signed["plans"][0]
    digest_ref = _digest_ref(registry, base.tag)
    pub = str(keys / "good.pub")
    assert all((r.push or {}).get("signed", {}).get("attestations") == ["cyclonedx", "slsaprovenance1"]
               for r in signed["results"])
    # the registry needs credentials: cosign reads them from a docker config of our own making here (the test's own
    # folder, removed with the session's: never the host's /tmp)
    cfg = tmp_path / "cosign-auth"
    cfg.mkdir(mode=0o700)
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (cfg / "config.json").write_text(json.dumps({"auths": {registry["REGISTRY"]: {"auth": token}}}))
    env = {**os.environ, "DOCKER_CONFIG": str(cfg)}

    def real(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cosign, *args, "--key", pub, "--insecure-ignore-tlog", "--allow-http-registry",
                               digest_ref], capture_output=True, text=True, timeout=120, env=env,
                              stdin=subprocess.DEVNULL)

    sig = real("verify")
    assert sig.returncode == 0, sig.stderr
    claimed = json.loads(sig.stdout)[0]["critical"]["image"]["docker-manifest-digest"]
    assert claimed == digest_ref.split("@")[1]
    for kind, predicate_type in (("cyclonedx", "https://cyclonedx.org/bom"),
                                 ("slsaprovenance1", "https://slsa.dev/provenance/v1")):
        att = real("verify-attestation", "--type", kind)
        assert att.returncode == 0, att.stderr
        statement = json.loads(base64.b64decode(json.loads(att.stdout.splitlines()[0])["payload"]))
        assert statement["predicateType"] == predicate_type
        assert statement["subject"][0]["digest"]["sha256"] == digest_ref.split("sha256:")[1]
        if kind == "cyclonedx":
            assert statement["predicate"]["bomFormat"] == "CycloneDX"
        else:
            build = statement["predicate"]["buildDefinition"]
            assert build["externalParameters"]["image"]["tag"] == base.tag
            assert build["resolvedDependencies"][0]["name"] == "matrix"
    # the other key: cosign itself refuses
    other = subprocess.run([cosign, "verify", "--key", str(keys / "other.pub"), "--insecure-ignore-tlog",
                            "--allow-http-registry", digest_ref], capture_output=True, text=True, timeout=120,
                           env=env, stdin=subprocess.DEVNULL)
    assert other.returncode != 0

    res = imagebuild("verify", base.tag, "--key", pub, env=_env(), timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"verified {digest_ref}" in res.stdout and "provenance: SLSA v1" in res.stdout
    # no secret anywhere: logs, record, command output
    outputs = "\n".join(signed["logs"]) + signed["record"].read_text() + res.stdout + res.stderr
    key_body = (keys / "good.key").read_text().splitlines()[1]
    for secret in (KEY_PASSWORD, PASSWORD, key_body):
        assert secret not in outputs
    record = json.loads(signed["record"].read_text())
    push = record["images"][base.id]["pushes"][base.repository]
    assert push["signed"]["key"] == str(keys / "good.key") and push["digest"] == digest_ref.split("@")[1]


def test_another_key_is_refused_by_verify_run_export_and_slurm(signed, keys, tmp_path, docker_client):
    base = signed["plans"][0]
    other = str(keys / "other.pub")
    res = imagebuild("verify", base.tag, "--key", other, env=_env(), timeout=300)
    assert res.returncode == 1
    _one_error_line(res, base.tag, "signed by another key")
    run = imagebuild("run", "--verify-key", other, "--gpus", "none", "--no-workspace", "--print", base.tag,
                     env=_env(), timeout=300)
    assert run.returncode == 1 and not run.stdout
    _one_error_line(run, base.tag, "signed by another key")
    export = imagebuild("export", base.tag, "-o", str(tmp_path / "x.sqsh"), env=_env(IMAGEBUILD_VERIFY_KEY=other),
                        timeout=300)
    assert export.returncode == 1 and not (tmp_path / "x.sqsh").exists()
    _one_error_line(export, base.tag, "signed by another key")
    slurm = imagebuild("slurm", "--verify-key", other, "--srun", base.tag, env=_env(), timeout=300)
    assert slurm.returncode == 1
    _one_error_line(slurm, base.tag)
    # the right key: run starts (prints) it, slurm names the verified digest, not the tag
    good = str(keys / "good.pub")
    run = imagebuild("run", "--verify-key", good, "--gpus", "none", "--no-workspace", "--print", base.tag,
                     env=_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    # the line printed names what was verified, REPO@DIGEST, never the tag resolved again
    assert "verified: " in run.stderr and f"{base.repository}@sha256:" in run.stdout, run.stdout
    assert base.tag not in run.stdout, run.stdout
    slurm = imagebuild("slurm", "--verify-key", good, "--srun", base.tag, "--", "true", env=_env(), timeout=300)
    assert slurm.returncode == 0, slurm.stderr
    assert "@sha256:" in slurm.stdout and f":{base.short_tag}" not in slurm.stdout
    # an image ID carries no signature (it names no registry): refused, not waved through
    image_id = docker_client.api.inspect_image(base.tag)["Id"]
    local = imagebuild("run", "--verify-key", good, "--gpus", "none", "--print", image_id, env=_env(), timeout=300)
    assert local.returncode == 1 and not local.stdout
    _one_error_line(local, image_id, "no registry reference to verify")


def test_a_tag_moved_after_signing_is_refused(signed, docker_client, registry, images, keys):
    runtime = signed["plans"][1]
    signed_ref = _digest_ref(registry, runtime.tag)
    images.build({"moved.bin": os.urandom(4096)}, None, runtime.tag)  # an unsigned image under the same tag
    out = list(docker_client.api.push(runtime.repository, runtime.short_tag, stream=True, decode=True,
                                      auth_config=auth(registry["REGISTRY"]).sdk_auth_config()))
    assert not [c for c in out if "error" in c], out
    moved_ref = _digest_ref(registry, runtime.tag)
    assert moved_ref != signed_ref
    res = imagebuild("verify", runtime.tag, "--key", str(keys / "good.pub"), env=_env(), timeout=300)
    assert res.returncode == 1
    _one_error_line(res, runtime.tag, moved_ref.split("@")[1], "unsigned")
    # the digest that was signed still verifies by digest
    by_digest = imagebuild("verify", signed_ref, "--key", str(keys / "good.pub"), env=_env(), timeout=300)
    assert by_digest.returncode == 0, by_digest.stderr


def test_an_attestation_made_for_another_digest_is_refused(signed, registry, keys):
    base, dev = signed["plans"][0], signed["plans"][2]
    client = RegistryClient(auth(registry["REGISTRY"]))
    repo = Reference.parse(dev.tag).repository
    base_digest = _digest_ref(registry, base.tag).split("@")[1]
    dev_digest = _digest_ref(registry, dev.tag).split("@")[1]
    # the dev image's attestations replaced by the base image's (same repository: the blobs are there)
    body, media, _ = client.manifest_raw(repo, f"sha256-{base_digest.split(':')[1]}.att")
    client.put_manifest(repo, f"sha256-{dev_digest.split(':')[1]}.att", body, media)
    res = imagebuild("verify", dev.tag, "--key", str(keys / "good.pub"), env=_env(), timeout=300)
    assert res.returncode == 1
    _one_error_line(res, dev.tag, dev_digest, "made for another digest")


def test_a_bad_key_or_password_stops_the_push_before_anything_moves(registry, keys, tmp_path):
    prefix = f"{registry['REGISTRY']}/{ns()}"
    matrix = str(Path(__file__).resolve().parents[2] / "images" / "cpu.yaml")
    common = ["push", "--matrix", matrix, "--registry", prefix, "--untested", "--state-dir", str(tmp_path / "st"),
              "--report-dir", str(tmp_path / "rep")]
    wrong = imagebuild(*common, "--sign-key", str(keys / "good.key"), env=_env(COSIGN_PASSWORD="not-" + KEY_PASSWORD),
                       timeout=300)
    assert wrong.returncode == 2
    _one_error_line(wrong, "not pushed", "wrong password", prefix)
    stdin = imagebuild(*common, "--sign-key", str(keys / "good.key"), "--sign-password-stdin",
                       stdin=OTHER_PASSWORD + "\n", env=_env(), timeout=300)
    assert stdin.returncode == 2
    _one_error_line(stdin, "wrong password")
    missing = imagebuild(*common, "--sign-key", str(tmp_path / "nope.key"), env=_env(), timeout=300)
    assert missing.returncode == 2
    _one_error_line(missing, "nope.key", "no such file")
    public = imagebuild(*common, "--sign-key", str(keys / "good.pub"), env=_env(), timeout=300)
    assert public.returncode == 2
    _one_error_line(public, "a public key")
    everything = wrong.stdout + wrong.stderr + stdin.stdout + stdin.stderr
    assert KEY_PASSWORD not in everything and OTHER_PASSWORD not in everything
    client = RegistryClient(auth(registry["REGISTRY"]))
    repo = Reference.parse(f"{prefix}/pytorch-cpu:x").repository
    assert client.manifest_digest(repo, "2.13-cpu-runtime") is None  # nothing pushed
    assert not (tmp_path / "rep").exists() or not list((tmp_path / "rep").iterdir())


def _sig_put(req) -> bool:
    return req.method == "PUT" and "/manifests/sha256-" in req.path and req.path.endswith(".sig")


def test_a_registry_refusing_the_signature_leaves_no_tag_on_the_unsigned_digest(docker_client, registry, images,
                                                                                keys):
    host, port = registry["REGISTRY"].split(":")
    key = SigningKey.from_option(str(keys / "good.key"), KEY_PASSWORD)
    with FaultProxy((host, int(port)), [Fault("503", _sig_put) for _ in range(60)]) as proxy:
        reg = f"{proxy.address}/{ns()}"

        def sign_pushed(image, digest_ref):
            client = RegistryClient(auth(proxy.address), scheme="http")
            return sign_digest(digest_ref, key, cosign_registry(client), sbom={"bomFormat": "CycloneDX"},
                               provenance={"buildDefinition": {}}).as_record()

        old = image_plan(reg, "base", None)
        images.build({"old.bin": os.urandom(8192)}, None, old.tag)
        first = Pusher(docker_client, auth(proxy.address)).push_image(old)  # unsigned, before any key
        assert first["status"] == "pushed", first
        images.build({"new.bin": os.urandom(8192)}, None, old.tag)
        moved = Pusher(docker_client, auth(proxy.address), sign_pushed=sign_pushed).push_image(old)
        assert moved["status"] == "failed" and "not signed" in moved["error"], moved
        # signing comes between the write by digest and the tags: the tag was never moved off its previous digest
        assert "no tag was moved to the unsigned" in moved["error"], moved["error"]
        fresh = image_plan(reg, "runtime", None)
        images.build({"fresh.bin": os.urandom(8192)}, None, fresh.tag)
        new = Pusher(docker_client, auth(proxy.address), sign_pushed=sign_pushed).push_image(fresh)
        assert new["status"] == "failed" and "no tag was moved to the unsigned" in new["error"], new
        assert any(e.action == "503" for e in proxy.log)
    direct = RegistryClient(auth(registry["REGISTRY"]))
    repo = Reference.parse(old.tag).repository
    assert direct.manifest_digest(repo, old.short_tag) == first["digest"]  # still on the digest it named before
    assert direct.manifest_digest(repo, fresh.short_tag) is None  # the new tag was never written
    for alias in (old.aliases[0].rsplit(":", 1)[1], fresh.aliases[0].rsplit(":", 1)[1]):
        assert direct.manifest_digest(repo, alias) in (None, first["digest"])  # no alias on an unsigned digest
