"""The registry as a cache: an image is "up to date in R" only when manifest, config and labels all agree, and any
registry error during the look-up means a local build (never a partial or false answer)."""

from __future__ import annotations

import hashlib
import json

import pytest
from _support import FakeClient

from imagebuild.builder.remote import RegistryUnavailable, find_in_registry
from imagebuild.models import BaseSource, ImagePlan, OSInfo, ResolvedVariant, Versions
from imagebuild.oci.registry import RegistryAuthError, RegistryError

REG = "reg.example:5000/ml"


def plan_image(flavor: str, parent: str | None = None) -> ImagePlan:
    osi = OSInfo("debian12", "debian", "12", "bookworm", "3.11", ("3.11",), "http://deb.debian.org/debian", "2.36")
    v = ResolvedVariant(key="2.13.0-cpu-py3.11-debian12", name="pytorch", registry=REG, cuda_tag="cpu", os=osi,
                        versions=Versions(torch="2.13.0", cuda="cpu", python="3.11", os="debian12"),
                        base=BaseSource(kind="bootstrap"), torch_index_url=None, flavors=("base", "runtime"),
                        tf32=False, gpu_archs=(), arch_list=(), min_driver=None)
    return ImagePlan(id=f"{v.key}-{flavor}", tag=f"{REG}/pytorch:{v.key}-{flavor}", flavor=flavor, parent=parent,
                     variant=v, dockerfile="", build_args={}, context_files={},
                     labels={"io.imagebuild.flavor": flavor, "io.imagebuild.torch": "2.13.0"},
                     inputs_hash=f"sha256:{flavor}-hash")


BASE = plan_image("base")
RUNTIME = plan_image("runtime", BASE.tag)


class FakeRegistry:
    """Manifests and config blobs by repository:tag; `fail_on` raises a registry error for that tag."""

    def __init__(self):
        self.manifests: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}
        self.fail_on: str | None = None
        self.calls: list[str] = []

    def put(self, img: ImagePlan, labels: dict, arch: str = "amd64", base_id: str | None = None,
            config_override: bytes | None = None) -> str:
        labels = dict(labels)
        if base_id:
            labels["io.imagebuild.base-id"] = base_id
        config = json.dumps({"os": "linux", "architecture": arch, "config": {"Labels": labels}}).encode()
        digest = "sha256:" + hashlib.sha256(config).hexdigest()
        self.blobs[digest] = config_override if config_override is not None else config
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"digest": digest, "size": len(config)},
                    "layers": [{"digest": "sha256:l1", "size": 1000}, {"digest": "sha256:l2", "size": 234}]}
        self.manifests[img.tag.split(":")[-1]] = json.dumps(manifest).encode()
        return digest

    def check_auth(self, repository, actions="pull,push"):
        self.calls.append("auth")

    def manifest(self, repository, reference):
        self.calls.append(f"manifest {reference}")
        if self.fail_on == reference:
            raise RegistryError("reg.example:5000: GET manifest: HTTP 500: boom", status=500, transient=True)
        body = self.manifests.get(reference)
        if body is None:
            return None
        return "sha256:" + hashlib.sha256(body).hexdigest(), json.loads(body)

    def blob(self, repository, digest, max_bytes=1 << 20):
        body = self.blobs[digest]
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise RegistryError(f"reg.example:5000: blob {digest} of {repository} has another digest")
        return body


def full_labels(img: ImagePlan) -> dict:
    return {**img.labels, "io.imagebuild.inputs-hash": img.inputs_hash}


def lookup(reg: FakeRegistry, images=(BASE, RUNTIME), local_id=None, arch="amd64"):
    logs: list[str] = []
    found = find_in_registry(list(images), lambda r: _Auth(), logs.append, local_id=local_id,
                             make_client=lambda auth: reg, arch=arch)
    return found, logs


class _Auth:
    def sdk_auth_config(self):
        return {"username": "u", "password": "p"}


def test_both_up_to_date_in_the_registry():
    reg = FakeRegistry()
    base_id = reg.put(BASE, full_labels(BASE))
    rt_id = reg.put(RUNTIME, full_labels(RUNTIME), base_id=base_id)
    found, logs = lookup(reg)
    assert found[BASE.tag].image_id == base_id and found[RUNTIME.tag].image_id == rt_id
    assert found[RUNTIME.tag].compressed == 1234 and found[RUNTIME.tag].ref.startswith(f"{REG}/pytorch@sha256:")
    assert logs == []


def test_manifest_without_the_label_is_not_up_to_date():
    reg = FakeRegistry()
    labels = full_labels(BASE)
    del labels["io.imagebuild.inputs-hash"]
    reg.put(BASE, labels)
    found, logs = lookup(reg, images=(BASE,))
    assert found == {} and "label missing" in logs[0]


def test_matching_label_but_other_config_is_not_up_to_date():
    reg = FakeRegistry()
    reg.put(BASE, {**full_labels(BASE), "io.imagebuild.torch": "2.12.0"})  # same hash label, other content label
    found, logs = lookup(reg, images=(BASE,))
    assert found == {} and "label io.imagebuild.torch='2.12.0'" in logs[0]
    reg.put(BASE, full_labels(BASE), arch="arm64")  # another platform
    found, logs = lookup(reg, images=(BASE,))
    assert found == {} and "platform linux/arm64" in logs[0]


def test_config_that_does_not_hash_to_its_digest_means_a_local_build():
    reg = FakeRegistry()
    reg.put(BASE, full_labels(BASE), config_override=json.dumps({"config": {"Labels": full_labels(BASE)}}).encode())
    with pytest.raises(RegistryUnavailable, match="another digest"):
        lookup(reg, images=(BASE,))


def test_registry_error_mid_lookup_discards_everything():
    reg = FakeRegistry()
    base_id = reg.put(BASE, full_labels(BASE))
    reg.put(RUNTIME, full_labels(RUNTIME), base_id=base_id)
    reg.fail_on = RUNTIME.tag.split(":")[-1]
    with pytest.raises(RegistryUnavailable, match="HTTP 500"):
        lookup(reg)


def test_refused_credentials_mean_a_local_build():
    reg = FakeRegistry()

    def refuse(repository, actions="pull,push"):
        raise RegistryAuthError("reg.example:5000: UNAUTHORIZED: authentication required (HTTP 401)", status=401)

    reg.check_auth = refuse
    with pytest.raises(RegistryUnavailable, match="UNAUTHORIZED"):
        lookup(reg)


def test_child_built_on_another_parent_is_rebuilt():
    reg = FakeRegistry()
    reg.put(BASE, full_labels(BASE))
    reg.put(RUNTIME, full_labels(RUNTIME), base_id="sha256:" + "0" * 64)
    found, logs = lookup(reg)
    assert BASE.tag in found and RUNTIME.tag not in found
    assert any("built on 000000000000" in line for line in logs)


def test_child_on_a_local_parent_and_missing_tags():
    reg = FakeRegistry()
    local = "sha256:" + "1" * 64
    reg.put(RUNTIME, full_labels(RUNTIME), base_id=local)
    found, logs = lookup(reg, local_id=lambda img: local)  # base not in the registry, but here with that ID
    assert list(found) == [RUNTIME.tag]
    assert any("not in reg.example:5000/ml" in line for line in logs)


def test_use_remote_pulls_only_what_a_child_builds_on(monkeypatch):
    from imagebuild.builder import remote as remote_mod
    from imagebuild.builder.options import BuildOptions
    from imagebuild.builder.progress import Progress
    from imagebuild.builder.state import RunState
    from imagebuild.models import ImageResult, Plan

    reg = FakeRegistry()
    base_id = reg.put(BASE, full_labels(BASE))
    found, _ = lookup(reg, images=(BASE,))
    dev = plan_image("dev", RUNTIME.tag)
    plan = Plan("m.yaml", [BASE, RUNTIME, dev])
    client = FakeClient()
    pulls = []

    def fake_pull(cl, remote):
        pulls.append(remote.ref)
        cl.api.images_by_id[remote.image_id] = {"Id": remote.image_id, "Size": 1, "Config": {"Labels": {}}}
        return remote.image_id

    monkeypatch.setattr(remote_mod, "pull_by_digest", fake_pull)
    run = RunState(client, plan, BuildOptions(remote=found, check_disk=False), Progress())
    res = ImageResult.of(BASE)
    assert remote_mod.use_remote(run, BASE, res)  # runtime (not in the registry) builds on it: pulled
    assert pulls == [found[BASE.tag].ref] and res.image_id == base_id and res.source.startswith("pulled ")
    assert not remote_mod.use_remote(run, RUNTIME, ImageResult.of(RUNTIME))
    run2 = RunState(FakeClient(), Plan("m.yaml", [BASE]), BuildOptions(remote=found, check_disk=False), Progress())
    res2 = ImageResult.of(BASE)
    assert remote_mod.use_remote(run2, BASE, res2) and res2.source == "registry reg.example:5000/ml"
    assert len(pulls) == 1  # nothing builds on it: not pulled
