"""Sign only what was checked, and many signers (issue 39, items 2 and 3), with the REAL cosign (2.5) against a real
registry and the real engine, both ways: the attack refused, the honest case passing.

- `push --only` one platform of a two-platform image re-publishes its index: over the other platform's image that
  this key signed in an earlier run it is published and signed; over an unsigned stranger pushed under that
  platform's tag, or over an image whose config names another architecture (signed or not), it is one `error:`
  line, the index is neither written nor signed and the plain tag keeps naming the index it named.
- `imagebuild verify --json` of an index reports each platform image.
- A second key signs beside the first: `verify --key A` and `--key B` both pass; the same key again adds nothing.
- A private key file others may read is refused; `push --dry-run` opens the key with its password.

Images are hand-made docker archives of one small layer whose config says linux/amd64 or linux/arm64 (no emulation:
nothing in them runs). Everything is named per test (own namespace, own state folder), so any order works.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import secrets
import sys
import tarfile
from pathlib import Path

import pytest

from imagebuild.models import Plan
from imagebuild.oci import Reference, RegistryClient
from imagebuild.pipeline.loaded import RecordBook
from imagebuild.pipeline.located import Located
from imagebuild.pipeline.pushing import push_step
from imagebuild.pipeline.settings import PushSettings
from imagebuild.plan.tags import index_references
from imagebuild.sign import SigningKey, cosign_registry, sign_digest

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import PASSWORD, USER, auth, cosign_key_pair, image_plan, imagebuild  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
PASSWORDS = {"a": "ka-" + secrets.token_hex(10), "b": "kb-" + secrets.token_hex(10)}
ARM = "linux/arm64"


@pytest.fixture(scope="module")
def keys(cosign, tmp_path_factory):
    """Two real cosign key pairs, a.key and b.key (two signers of the same images)."""
    folder = tmp_path_factory.mktemp("signers")
    for name, password in PASSWORDS.items():
        cosign_key_pair(cosign, folder / name, password)
    return folder


class Loaded:
    """Hand-made single-layer images loaded into the engine (any architecture: nothing runs), removed at the end."""

    def __init__(self, client) -> None:
        self.client = client
        self.refs: list[str] = []
        self.ids: list[str] = []

    def image(self, tag: str, arch: str) -> str:
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            data = f"{arch} {secrets.token_hex(16)}\n".encode()
            info = tarfile.TarInfo("payload.txt")
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        layer_bytes = layer.getvalue()
        diff_id = hashlib.sha256(layer_bytes).hexdigest()
        config = json.dumps({"architecture": arch, "os": "linux", "created": "2023-11-14T22:13:20Z",
                             "config": {"Labels": {"test": "trust-signers"}},
                             "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
                             "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "test"}]}).encode()
        config_hex = hashlib.sha256(config).hexdigest()
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            manifest = json.dumps([{"Config": f"{config_hex}.json", "RepoTags": [tag],
                                    "Layers": [f"{diff_id}/layer.tar"]}]).encode()
            for name, body in ((f"{config_hex}.json", config), (f"{diff_id}/layer.tar", layer_bytes),
                               ("manifest.json", manifest)):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(body), 1_700_000_000
                tar.addfile(info, io.BytesIO(body))
        self.client.images.load(archive.getvalue())
        self.refs.append(tag)
        self.ids.append(str(self.client.api.inspect_image(tag)["Id"]))
        return self.ids[-1]

    def cleanup(self) -> None:
        for ref in [*self.refs, *self.ids]:
            try:
                self.client.api.remove_image(ref, force=True)
            except Exception:
                pass


@pytest.fixture(scope="module")
def loaded(docker_client):
    made = Loaded(docker_client)
    yield made
    made.cleanup()


def _arm(img):
    """`img`'s linux/arm64 twin, named as plan/tags.py names another platform's image (-arm64 before the flavor)."""
    variant = dataclasses.replace(img.variant, platform=ARM)
    suffix = f"-{img.flavor}"
    return dataclasses.replace(img, id=img.id.replace(suffix, f"-arm64{suffix}"), variant=variant,
                               tag=img.tag.removesuffix(suffix) + f"-arm64{suffix}",
                               aliases=tuple(a.removesuffix(suffix) + f"-arm64{suffix}" for a in img.aliases),
                               inputs_hash=img.inputs_hash + "-arm64")


class Run:
    """One image (or a two-platform pair) of its own namespace, state and matrix file, pushed with push_step."""

    def __init__(self, registry: dict, tmp: Path, client) -> None:
        prefix = f"{registry['REGISTRY']}/ibdev-signers-{secrets.token_hex(4)}"
        self.amd = image_plan(prefix, "base", None)
        self.arm = _arm(self.amd)
        self.client, self.tmp = client, tmp
        self.matrix = tmp / "signers.yaml"
        self.matrix.write_text("# the record's matrix file\n")
        self.registry = RegistryClient(auth(registry["REGISTRY"]))
        self.repo = Reference.parse(self.amd.tag).repository

    def push(self, images: list, key: Path, password: str, plans: list | None = None):
        located = [(p, Located(self.client.api.inspect_image(p.tag)["Id"])) for p in images]
        settings = PushSettings(require_tests=False, username=USER, password=PASSWORD, sign_key=str(key),
                                sign_password=password)
        logs: list[str] = []
        run = push_step(self.client, Plan(str(self.matrix), plans or images), located,
                        RecordBook(self.matrix, str(self.tmp / "state"), None), settings, logs.append)
        return {r.tag: r.push or {} for r in run.results}, logs

    def served(self, reference: str) -> str | None:
        return self.registry.manifest_digest(self.repo, reference)

    def layers(self, digest: str, suffix: str) -> int:
        """How many signatures (.sig) or attestations (.att) cosign keeps for `digest`."""
        found = self.registry.manifest(self.repo, f"sha256-{digest.split(':')[1]}.{suffix}")
        return len(found[1].get("layers") or []) if found else 0


def _env(tmp: Path) -> dict[str, str]:
    return {"IMAGEBUILD_REGISTRY_USER": USER, "IMAGEBUILD_REGISTRY_PASSWORD": PASSWORD,
            "IMAGEBUILD_STATE_DIR": str(tmp / "cli-state")}


def _errors(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("error: ")]


def _docker_push(client, registry: dict, tag: str) -> None:
    """What anyone with push access does: the engine pushes an image under a tag, nothing signs it."""
    ref = Reference.parse(tag)
    out = list(client.api.push(ref.name, ref.tag, stream=True, decode=True,
                               auth_config=auth(registry["REGISTRY"]).sdk_auth_config()))
    assert not [c for c in out if "error" in c], out


def test_an_index_is_signed_only_over_members_the_key_vouches_for(docker_client, registry, loaded, keys, tmp_path):
    run = Run(registry, tmp_path, docker_client)
    amd, arm = run.amd, run.arm
    both = [amd, arm]
    loaded.image(amd.tag, "amd64")
    loaded.image(arm.tag, "arm64")
    first, logs = run.push(both, keys / "a.key", PASSWORDS["a"])
    index = first[amd.tag]["index"]
    assert index["status"] == "pushed" and index["signed"], (first, logs)
    plain = Reference.parse(index_references(amd)[0]).tag
    assert run.served(plain) == index["digest"]

    # honest: --only amd64 (a new amd64 image) over the arm64 image this key signed in the run before
    loaded.image(amd.tag, "amd64")
    honest, logs = run.push([amd], keys / "a.key", PASSWORDS["a"], plans=both)
    index2 = honest[amd.tag]["index"]
    assert index2["status"] == "pushed" and index2["signed"] and not _errors(logs), (honest, logs)
    assert index2["platforms"][ARM] == first[arm.tag]["digest"] and run.served(plain) == index2["digest"]

    # attack: a stranger (unsigned, arm64) under the arm64 tag; --only amd64 again (the same amd64 image)
    loaded.image(arm.tag, "arm64")
    _docker_push(docker_client, registry, arm.tag)
    stranger = run.served(arm.short_tag)
    refused, logs = run.push([amd], keys / "a.key", PASSWORDS["a"], plans=both)
    index3 = refused[amd.tag]["index"]
    [error] = _errors(logs)
    assert refused[amd.tag]["status"] == "failed" and index3["status"] == "failed"
    assert stranger in error and "not signed by the signing key" in error and "unsigned" in error, error
    assert "signed" not in index3 and run.served(index3["digest"]) is None  # never written, never signed
    assert run.served(plain) == index2["digest"]  # the plain tag keeps naming the index it named
    assert not any("Traceback" in ln for ln in logs)

    # attack: an amd64 image under the arm64 tag, even one the key signed, is not the arm64 member
    loaded.image(arm.tag, "amd64")
    _docker_push(docker_client, registry, arm.tag)
    wrong = run.served(arm.short_tag)
    key = SigningKey.from_option(str(keys / "a.key"), PASSWORDS["a"])
    sign_digest(f"{Reference.parse(arm.tag).name}@{wrong}", key, cosign_registry(run.registry),
                sbom={"bomFormat": "CycloneDX"},
                provenance={"buildDefinition": {"buildType": "x"}, "runDetails": {"builder": {"id": "x"}}})
    again, logs = run.push([amd], keys / "a.key", PASSWORDS["a"], plans=both)
    [error] = _errors(logs)
    assert "says linux/amd64, not linux/arm64" in error and wrong in error, error
    assert again[amd.tag]["index"]["status"] == "failed" and run.served(plain) == index2["digest"]

    # the tag still names the honest index: verify --json reports each member, its digest and its attestations
    res = imagebuild("verify", index_references(amd)[0], "--key", str(keys / "a.pub"), "--json",
                     env=_env(tmp_path), timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["digest"] == index2["digest"]
    assert {m["platform"]: m["digest"] for m in doc["members"]} == {"linux/amd64": honest[amd.tag]["digest"],
                                                                   ARM: first[arm.tag]["digest"]}
    assert all(set(m["attestations"]) == {"cyclonedx", "slsaprovenance1"} for m in doc["members"])


def test_a_second_key_signs_beside_the_first(docker_client, registry, loaded, keys, tmp_path):
    run = Run(registry, tmp_path, docker_client)
    amd = run.amd
    loaded.image(amd.tag, "amd64")
    by_a, logs = run.push([amd], keys / "a.key", PASSWORDS["a"])
    digest = by_a[amd.tag]["digest"]
    assert by_a[amd.tag]["status"] == "pushed" and by_a[amd.tag]["signed"], logs
    by_b, logs = run.push([amd], keys / "b.key", PASSWORDS["b"])  # rotation, or a second pipeline
    assert by_b[amd.tag]["status"] == "unchanged" and by_b[amd.tag]["digest"] == digest, logs
    assert by_b[amd.tag]["signed"]["already_signed"] is False
    assert (run.layers(digest, "sig"), run.layers(digest, "att")) == (2, 4)
    for name in ("a", "b"):
        res = imagebuild("verify", amd.tag, "--key", str(keys / f"{name}.pub"), env=_env(tmp_path), timeout=300)
        assert res.returncode == 0 and f"verified {Reference.parse(amd.tag).name}@{digest}" in res.stdout, res.stderr
    # the same key again: nothing added (one signature and one attestation per type and key)
    again, _ = run.push([amd], keys / "a.key", PASSWORDS["a"])
    assert again[amd.tag]["signed"]["already_signed"] is True
    assert again[amd.tag]["signed"]["attested_before"] == ["cyclonedx", "slsaprovenance1"]
    assert (run.layers(digest, "sig"), run.layers(digest, "att")) == (2, 4)
    outputs = "\n".join(logs) + (tmp_path / "state" / "signers.state.json").read_text()
    assert PASSWORDS["a"] not in outputs and PASSWORDS["b"] not in outputs


def test_key_files_and_passwords_are_checked_before_a_push_and_in_a_dry_run(registry, keys, tmp_path):
    matrix = str(Path(__file__).resolve().parents[2] / "images" / "cpu.yaml")
    prefix = f"{registry['REGISTRY']}/ibdev-signers-{secrets.token_hex(4)}"
    common = ["push", "--matrix", matrix, "--registry", prefix, "--untested", "--state-dir", str(tmp_path / "st"),
              "--report-dir", str(tmp_path / "rep")]
    open_key = tmp_path / "open.key"
    open_key.write_bytes((keys / "a.key").read_bytes())
    open_key.chmod(0o644)
    for args in (common, [*common, "--dry-run"]):
        res = imagebuild(*args, "--sign-key", str(open_key), env={**_env(tmp_path), "COSIGN_PASSWORD": PASSWORDS["a"]},
                         timeout=300)
        assert res.returncode == 2, res.stderr
        [error] = _errors(res.stderr.splitlines())
        assert "permissions 0644: every user may read this private key" in error and "chmod 600" in error
        assert "Traceback" not in res.stderr
    wrong = imagebuild(*common, "--dry-run", "--sign-key", str(keys / "a.key"),
                       env={**_env(tmp_path), "COSIGN_PASSWORD": PASSWORDS["b"]}, timeout=300)
    assert wrong.returncode == 2 and "dry run" not in wrong.stdout
    [error] = _errors(wrong.stderr.splitlines())
    assert "wrong password" in error and PASSWORDS["b"] not in wrong.stderr + wrong.stdout
    right = imagebuild(*common, "--dry-run", "--sign-key", str(keys / "a.key"),
                       env={**_env(tmp_path), "COSIGN_PASSWORD": PASSWORDS["a"]}, timeout=300)
    assert right.returncode == 0, right.stderr
    assert f"dry run: would sign with {keys / 'a.key'}" in right.stdout
    assert RegistryClient(auth(registry["REGISTRY"])).manifest_digest(
        Reference.parse(f"{prefix}/pytorch-cpu:x").repository, "2.13-cpu-runtime") is None  # nothing pushed
