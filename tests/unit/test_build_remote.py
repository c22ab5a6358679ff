"""The registry as a cache: an image is "up to date in R" only when manifest, config and labels all agree, and any
registry error during the look-up means a local build (never a partial or false answer)."""

from __future__ import annotations

import json

import pytest
from _fake_engine import FakeEngine
from _fake_registry import FakeRegistry

from imagebuild.builder.remote import RegistryUnavailable, find_in_registry
from imagebuild.models import BaseSource, ImagePlan, OSInfo, ResolvedVariant, Versions
from imagebuild.oci import Reference
from imagebuild.oci.registry import RegistryAuthError

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


OS_LAYERS = ["sha256:" + "a" * 64]


def layers(img: ImagePlan, on: list[str] | None = None) -> list[str]:
    """The diff IDs of `img` built on an image with layers `on` (default: the OS image's)."""
    return [*(OS_LAYERS if on is None else on), "sha256:" + img.flavor.encode().hex().ljust(64, "0")]


def put(reg: FakeRegistry, img: ImagePlan, labels: dict, arch: str = "amd64", on: list[str] | None = None,
        config_override: bytes | None = None) -> str:
    """`img`'s tag in the registry: a manifest whose config carries `labels` and `img`'s own layer on `on` (see
    `layers`); the config digest."""
    config = json.dumps({"os": "linux", "architecture": arch, "config": {"Labels": dict(labels)},
                         "rootfs": {"type": "layers", "diff_ids": layers(img, on)}}).encode()
    ref = Reference.parse(img.tag)
    digest = reg.put_image(ref.repository, ref.tag, config, [("sha256:l1", 1000), ("sha256:l2", 234)])
    if config_override is not None:
        reg.blobs[digest] = config_override  # served under the digest of another config
    return digest


def full_labels(img: ImagePlan) -> dict:
    return {**img.labels, "io.imagebuild.inputs-hash": img.inputs_hash}


def lookup(reg: FakeRegistry, images=(BASE, RUNTIME), local_layers=None, arch="amd64"):
    logs: list[str] = []
    found = find_in_registry(list(images), lambda r: _Auth(), logs.append, local_layers=local_layers,
                             make_client=lambda auth: reg, arch=arch)
    return found, logs


class _Auth:
    def sdk_auth_config(self):
        return {"username": "u", "password": "p"}


def test_both_up_to_date_in_the_registry():
    reg = FakeRegistry()
    base_id = put(reg, BASE, full_labels(BASE))
    rt_id = put(reg, RUNTIME, full_labels(RUNTIME), on=layers(BASE))
    found, logs = lookup(reg)
    assert found[BASE.tag].image_id == base_id and found[RUNTIME.tag].image_id == rt_id
    assert found[RUNTIME.tag].compressed == 1234 and found[RUNTIME.tag].ref.startswith(f"{REG}/pytorch@sha256:")
    assert logs == []


def test_manifest_without_the_label_is_not_up_to_date():
    reg = FakeRegistry()
    labels = full_labels(BASE)
    del labels["io.imagebuild.inputs-hash"]
    put(reg, BASE, labels)
    found, logs = lookup(reg, images=(BASE,))
    assert found == {} and "label missing" in logs[0]


def test_matching_label_but_other_config_is_not_up_to_date():
    reg = FakeRegistry()
    put(reg, BASE, {**full_labels(BASE), "io.imagebuild.torch": "2.12.0"})  # same hash label, other content label
    found, logs = lookup(reg, images=(BASE,))
    assert found == {} and "label io.imagebuild.torch='2.12.0'" in logs[0]
    put(reg, BASE, full_labels(BASE), arch="arm64")  # another platform
    found, logs = lookup(reg, images=(BASE,))
    assert found == {} and "platform linux/arm64" in logs[0]


def test_config_that_does_not_hash_to_its_digest_means_a_local_build():
    reg = FakeRegistry()
    put(reg, BASE, full_labels(BASE), config_override=json.dumps({"config": {"Labels": full_labels(BASE)}}).encode())
    with pytest.raises(RegistryUnavailable, match=r"blob sha256:\w+ of ml/pytorch has digest sha256:"):
        lookup(reg, images=(BASE,))


def test_registry_error_mid_lookup_discards_everything():
    reg = FakeRegistry()
    put(reg, BASE, full_labels(BASE))
    put(reg, RUNTIME, full_labels(RUNTIME), on=layers(BASE))
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
    put(reg, BASE, full_labels(BASE))
    put(reg, RUNTIME, full_labels(RUNTIME), on=layers(BASE, on=["sha256:" + "0" * 64]))  # on another OS image
    found, logs = lookup(reg)
    assert BASE.tag in found and RUNTIME.tag not in found
    assert any("do not begin with the layers of its parent" in line for line in logs)


def test_child_on_a_local_parent_and_missing_tags():
    reg = FakeRegistry()
    local = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    put(reg, RUNTIME, full_labels(RUNTIME), on=local)
    found, logs = lookup(reg, local_layers=lambda img: local)  # base not in the registry, but here with those layers
    assert list(found) == [RUNTIME.tag]
    assert any("not in reg.example:5000/ml" in line for line in logs)


def test_use_remote_pulls_only_what_a_child_builds_on(monkeypatch):
    from imagebuild.builder import remote as remote_mod
    from imagebuild.builder.options import BuildOptions
    from imagebuild.builder.progress import Progress
    from imagebuild.builder.state import RunState
    from imagebuild.models import ImageResult, Plan

    reg = FakeRegistry()
    base_id = put(reg, BASE, full_labels(BASE))
    found, _ = lookup(reg, images=(BASE,))
    dev = plan_image("dev", RUNTIME.tag)
    plan = Plan("m.yaml", [BASE, RUNTIME, dev])
    client = FakeEngine()
    pulls = []

    def fake_pull(cl, remote):
        pulls.append(remote.ref)
        cl.add_image(None, {}, size=1, image_id=remote.image_id)
        return remote.image_id

    monkeypatch.setattr(remote_mod, "pull_by_digest", fake_pull)
    run = RunState(client, plan, BuildOptions(remote=found, check_disk=False), Progress())
    res = ImageResult.of(BASE)
    assert remote_mod.use_remote(run, BASE, res)  # runtime (not in the registry) builds on it: pulled
    assert pulls == [found[BASE.tag].ref] and res.image_id == base_id and res.source.startswith("pulled ")
    assert not remote_mod.use_remote(run, RUNTIME, ImageResult.of(RUNTIME))
    run2 = RunState(FakeEngine(), Plan("m.yaml", [BASE]), BuildOptions(remote=found, check_disk=False), Progress())
    res2 = ImageResult.of(BASE)
    assert remote_mod.use_remote(run2, BASE, res2) and res2.source == "registry reg.example:5000/ml"
    assert len(pulls) == 1  # nothing builds on it: not pulled


def put_zstd(reg: FakeRegistry, img: ImagePlan, labels: dict, on: list[str] | None = None) -> str:
    """`img` pushed as `imagebuild push` writes it: an OCI manifest with zstd layers."""
    cfg = put(reg, img, labels, on=on)
    ref = Reference.parse(img.tag)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": 1},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": "sha256:l1",
                            "size": 1000}]}
    reg.put_manifest(ref.repository, ref.tag, json.dumps(manifest).encode())
    return cfg


def test_a_zstd_parent_is_marked_for_skopeo_only_on_an_engine_that_cannot_inflate_zstd():
    reg = FakeRegistry()
    put_zstd(reg, BASE, full_labels(BASE))
    logs: list[str] = []
    found = find_in_registry([BASE, RUNTIME], lambda r: _Auth(), logs.append, make_client=lambda auth: reg,
                             arch="amd64", pulls_zstd=False)
    assert set(found) == {BASE.tag} and found[BASE.tag].zstd  # Docker 20.10: pulled through skopeo
    # a modern engine pulls it itself; and with its child up to date too, nothing is pulled at all on either engine
    modern = find_in_registry([BASE, RUNTIME], lambda r: _Auth(), logs.append, make_client=lambda auth: reg,
                              arch="amd64", pulls_zstd=True)
    assert BASE.tag in modern and not modern[BASE.tag].zstd
    put_zstd(reg, RUNTIME, full_labels(RUNTIME), on=layers(BASE))
    both = find_in_registry([BASE, RUNTIME], lambda r: _Auth(), logs.append, make_client=lambda auth: reg,
                            arch="amd64", pulls_zstd=False)
    assert set(both) == {BASE.tag, RUNTIME.tag}


def test_pull_by_digest_takes_zstd_images_through_skopeo_and_the_rest_through_the_engine(monkeypatch):
    from imagebuild.builder import remote as remote_mod

    fetched: list[tuple[str, bool]] = []

    def fake_fetch(store, ref, auth_config, *, plain_http):
        fetched.append((ref, plain_http))
        store.add_image(None, {}, size=1, image_id="sha256:" + "c" * 64)

    monkeypatch.setattr(remote_mod, "fetch_into_engine", fake_fetch)
    client = FakeEngine()
    remote = remote_mod.RemoteImage(BASE.tag, "reg.example:5000/ml/base@sha256:" + "d" * 64, "sha256:" + "d" * 64,
                                    "sha256:" + "c" * 64, "reg.example:5000/ml", 10, None, zstd=True, plain_http=True)
    assert remote_mod.pull_by_digest(client, remote) == "sha256:" + "c" * 64
    assert fetched == [(remote.ref, True)]
