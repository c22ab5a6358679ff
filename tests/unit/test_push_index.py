"""One tag, several platforms (push/index.py, push/publish.py): the amd64 and arm64 images of one variant and flavor
are written by digest, then one OCI index naming both goes under the plain tag and its aliases; the arm64 image keeps
its own `-arm64-` tags. A platform image that failed, or a registry refusing the index, moves no tag."""

from __future__ import annotations

import dataclasses
import json

from _push_fakes import D2, REG, add, fake_engine, fake_registry, make_image

from imagebuild.models import Plan
from imagebuild.oci import RegistryAuth
from imagebuild.plan.tags import index_references, references
from imagebuild.push import push_plan
from imagebuild.push.index import INDEX_MEDIA_TYPE, index_groups, platform_descriptor

ARM = "linux/arm64"


def arm(img):
    """`img` as its linux/arm64 twin: the tag and aliases carry -arm64 before the flavor, as plan/tags.py names them."""
    variant = dataclasses.replace(img.variant, platform=ARM)
    suffix = f"-{img.flavor}"
    return dataclasses.replace(img, id=img.id.replace(suffix, f"-arm64{suffix}"), variant=variant,
                               tag=img.tag.removesuffix(suffix) + f"-arm64{suffix}",
                               aliases=tuple(a.removesuffix(suffix) + f"-arm64{suffix}" for a in img.aliases),
                               inputs_hash=img.inputs_hash + "-arm64")


def pair():
    amd = make_image(flavor="base", aliases=("2.9-cuda12.8-base",))
    return amd, arm(amd)


def push(plan, reg, api, **kw):
    return push_plan(plan, client=api, auth_for=lambda r: RegistryAuth(r, "u", "pw-1"), require_tests=False,
                     sleep=lambda s: None, make_copier=lambda store: reg.copier(), **kw)


def setup(monkeypatch):
    reg = fake_registry()
    api = fake_engine(reg)
    monkeypatch.setattr("imagebuild.push.pusher.RegistryClient", lambda *a, **k: reg)
    amd, arm64 = pair()
    add(api, amd.tag, image_id="sha256:" + "a" * 64)
    add(api, arm64.tag, image_id="sha256:" + "b" * 64)
    reg.platforms["sha256:" + "b" * 64] = ARM  # its config says arm64, as a real arm64 image's does
    return reg, api, amd, arm64


def test_index_references_drop_the_platform_suffix_before_the_flavor():
    amd, arm64 = pair()
    assert index_references(arm64) == references(amd) == [amd.tag, f"{REG}/pytorch:2.9-cuda12.8-base"]
    assert index_references(amd) == references(amd)
    assert platform_descriptor("linux/arm64/v8") == {"os": "linux", "architecture": "arm64", "variant": "v8"}
    [group] = index_groups([amd, arm64])
    assert [m.variant.platform for m in group.images] == ["linux/amd64", ARM] and group.carrier == amd
    assert index_groups([amd]) == []  # one platform only: no index, tags as before


def test_the_plain_tag_names_one_index_of_both_platforms(monkeypatch):
    reg, api, amd, arm64 = setup(monkeypatch)
    signed: list[str] = []
    results = push(Plan("m.yaml", [amd, arm64]), reg, api,
                   sign_pushed=lambda image, ref: signed.append(ref) or {"by": "key"},
                   sign_index=lambda ref: signed.append("index " + ref) or {"index": True})
    by_tag = {r.tag: r.push for r in results}
    amd_push, arm_push = by_tag[amd.tag], by_tag[arm64.tag]
    assert amd_push["status"] == arm_push["status"] == "pushed"
    index = amd_push["index"]
    assert index["status"] == "pushed" and index["platforms"] == {"linux/amd64": amd_push["digest"],
                                                                   ARM: arm_push["digest"]}
    # the plain tag and its alias name the index; the arm64 image keeps its own tags
    for tag in (amd.short_tag, "2.9-cuda12.8-base"):
        assert reg.tags[("pytorch", tag)] == index["digest"]
    assert reg.tags[("pytorch", arm64.short_tag)] == arm_push["digest"]
    doc = json.loads(reg.manifests[index["digest"]])
    assert doc["mediaType"] == INDEX_MEDIA_TYPE
    assert [(m["digest"], m["platform"]["architecture"]) for m in doc["manifests"]] == [
        (amd_push["digest"], "amd64"), (arm_push["digest"], "arm64")]
    assert all(m["size"] == len(reg.manifests[m["digest"]]) for m in doc["manifests"])
    # every digest signed before a tag names it: both images, then the index
    assert signed[-1] == f"index {REG}/pytorch@{index['digest']}" and len(signed) == 3
    # a second push: all unchanged, the index too
    again = {r.tag: r.push for r in push(Plan("m.yaml", [amd, arm64]), reg, api)}
    assert again[amd.tag]["index"]["status"] == "unchanged" and again[amd.tag]["index"]["digest"] == index["digest"]


def test_a_platform_image_missing_publishes_no_index_and_moves_no_tag(monkeypatch):
    reg, api, amd, arm64 = setup(monkeypatch)
    reg.tags[("pytorch", amd.short_tag)] = D2  # what the plain tag named before
    results = push(Plan("m.yaml", [amd, arm64]), reg, api, images=[amd])  # arm64 neither selected nor pushed before
    [res] = results
    assert res.push["status"] == "failed" and res.push["index"]["status"] == "failed"
    assert "no index published" in res.push["index"]["error"] and "linux/arm64" in res.push["index"]["error"]
    assert reg.tags == {("pytorch", amd.short_tag): D2}  # never a single-platform manifest under the plain tag


def test_pushing_one_platform_again_keeps_the_other_from_the_index(monkeypatch):
    reg, api, amd, arm64 = setup(monkeypatch)
    first = {r.tag: r.push for r in push(Plan("m.yaml", [amd, arm64]), reg, api)}
    index = first[amd.tag]["index"]["digest"]
    [only_arm] = push(Plan("m.yaml", [amd, arm64]), reg, api, images=[arm64])
    assert only_arm.push["index"]["status"] == "unchanged" and only_arm.push["index"]["digest"] == index
    assert reg.tags[("pytorch", amd.short_tag)] == index


def test_a_registry_refusing_an_oci_index_is_one_line_and_no_tag_moves(monkeypatch):
    reg, api, amd, arm64 = setup(monkeypatch)
    reg.tags[("pytorch", amd.short_tag)] = D2
    reg.refuse_index = True
    logs: list[str] = []
    results = push(Plan("m.yaml", [amd, arm64]), reg, api, log=logs.append)
    carrier = next(r for r in results if r.tag == amd.tag).push
    assert carrier["status"] == "failed"
    error = carrier["index"]["error"]
    assert "refused the OCI image index of linux/amd64, linux/arm64" in error and "no tag was moved" in error
    assert "\n" not in error
    assert reg.tags[("pytorch", amd.short_tag)] == D2 and ("pytorch", "2.9-cuda12.8-base") not in reg.tags
    assert sum(1 for m in logs if m.startswith("error: ")) == 1
