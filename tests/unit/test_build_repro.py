"""Reproducible images without an engine: the bootstrap image's config and docker-archive, the source date, the
"same content" comparison and the executor keeping a reproduced image."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from _fake_engine import FakeEngine
from _support import chain, plan_of

from imagebuild.builder import BuildOptions, bootstrap, build_plan, ociarchive
from imagebuild.builder.progress import Progress
from imagebuild.builder.reproduced import differences
from imagebuild.builder.sourcedate import source_date_epoch
from imagebuild.dates import SOURCE_DATE_LABEL, parse_created

EPOCH = 1_764_547_200  # 2025-12-01T00:00:00Z


def _layer(tmp_path: Path, content: bytes = b"hello\n") -> Path:
    path = tmp_path / "rootfs.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("./etc/hello")
        info.size, info.mtime = len(content), EPOCH
        tar.addfile(info, io.BytesIO(content))
    return path


def _spec():
    from _support import DEBIAN12

    return bootstrap.BootstrapSpec("debian12", "debian", "bookworm", "http://u:pw@mirror.example/debian",
                                   ("main",), ("python3", "tini"), archive_keys=DEBIAN12.archive_keys,
                                   keyring=DEBIAN12.keyring)


# -- the bootstrap image's config and archive ------------------------------------------------------------------
def test_bootstrap_config_is_canonical_dated_by_the_epoch_and_carries_the_reuse_labels(tmp_path):
    layer = _layer(tmp_path)
    diff_id = ociarchive.file_digest(layer)
    assert diff_id == "sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest()
    spec = _spec()
    one = bootstrap.bootstrap_config(spec, spec.hash(), diff_id, EPOCH, "mmdebstrap", "amd64")
    two = bootstrap.bootstrap_config(spec, spec.hash(), diff_id, EPOCH, "mmdebstrap", "amd64")
    assert one == two  # same inputs, same bytes, same image ID
    doc = json.loads(one)
    assert doc["created"] == "2025-12-01T00:00:00Z" and doc["history"][0]["created"] == doc["created"]
    assert doc["rootfs"] == {"type": "layers", "diff_ids": [diff_id]}
    assert doc["architecture"] == "amd64" and doc["os"] == "linux"
    labels = doc["config"]["Labels"]
    assert labels[bootstrap.HASH_LABEL] == spec.hash() and labels["io.imagebuild.bootstrap-suite"] == "bookworm"
    assert "pw" not in one.decode()  # mirror credentials never reach the config
    assert doc["config"]["Env"] == [f"PATH={bootstrap.DEFAULT_PATH}", "LANG=C.UTF-8"]
    assert doc["config"]["Cmd"] == ["bash"]
    # anything that changes the content or the date changes the ID
    later = bootstrap.bootstrap_config(spec, spec.hash(), diff_id, EPOCH + 1, "mmdebstrap", "amd64")
    other = bootstrap.bootstrap_config(spec, spec.hash(), "sha256:" + "0" * 64, EPOCH, "mmdebstrap", "amd64")
    assert len({ociarchive.config_id(c) for c in (one, later, other)}) == 3


def test_docker_archive_holds_the_layer_unchanged_the_config_and_the_tag(tmp_path):
    layer = _layer(tmp_path)
    config = ociarchive.image_config(diff_id=ociarchive.file_digest(layer), epoch=EPOCH, architecture="arm64",
                                     labels={"b": "2", "a": "1"}, env=["PATH=/bin"], cmd=["sh"], created_by="t")
    out = tmp_path / "image.tar"
    ociarchive.write_docker_archive(out, layer, config, "imagebuild-os/debian12:abc")
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        cid = ociarchive.config_id(config)[7:]
        assert manifest == [{"Config": f"{cid}.json", "RepoTags": ["imagebuild-os/debian12:abc"],
                             "Layers": [f"{cid}/layer.tar"]}]
        assert tar.extractfile(f"{cid}.json").read() == config
        assert tar.extractfile(f"{cid}/layer.tar").read() == layer.read_bytes()
        assert {m.mtime for m in tar.getmembers()} == {0}
    first = out.read_bytes()
    ociarchive.write_docker_archive(out, layer, config, "imagebuild-os/debian12:abc")
    assert out.read_bytes() == first


@pytest.mark.parametrize("chunk", [{"errorDetail": {"message": "no space left on device"}, "error": "no space left on device"},
                                   {"message": "no space left on device"}])
def test_load_errors_inside_the_stream_fail_with_the_message(tmp_path, chunk):
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"x")
    engine = FakeEngine()
    engine.load_streams.append([{"stream": "Loading layer"}, chunk])
    with pytest.raises(ociarchive.LoadError, match="loading the debian12 rootfs into the engine failed: no space"):
        ociarchive.load_archive(engine, archive, "the debian12 rootfs")
    engine.load_streams.append([{"stream": "Loaded image: imagebuild-os/debian12:abc\n"}])
    assert ociarchive.load_archive(engine, archive, "x") == ["Loaded image: imagebuild-os/debian12:abc"]
    assert engine.loaded == [b"x", b"x"]


# -- the source date -------------------------------------------------------------------------------------------
def test_parse_created_and_source_date_from_label_created_or_environment(monkeypatch):
    assert parse_created("2025-12-01T00:00:00Z") == EPOCH
    assert parse_created("2025-12-01T00:00:00.123456789Z") == EPOCH
    assert parse_created("2025-12-01T01:00:00+01:00") == EPOCH
    assert parse_created("0001-01-01T00:00:00Z") is None and parse_created("yesterday") is None
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    c = FakeEngine()
    parent = c.add_image("p", {SOURCE_DATE_LABEL: "1700000000"})
    c.images_by_id[parent]["Created"] = "2026-06-01T10:00:00.5Z"  # a build time: not used when labelled
    os_image = c.add_image("os", {})
    c.images_by_id[os_image]["Created"] = "2025-12-01T00:00:00Z"
    assert source_date_epoch(c, parent) == 1_700_000_000
    assert source_date_epoch(c, os_image) == EPOCH
    assert source_date_epoch(c, "sha256:missing") == 0
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "42")
    assert source_date_epoch(c, parent) == 42


def test_build_passes_the_source_date_and_dates_created_by_it_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    c = FakeEngine()
    base_ref = "example/os:1@sha256:" + "0" * 64
    os_id = c.add_image(base_ref, {})
    c.images_by_id[os_id]["Created"] = "2025-12-01T00:00:00Z"
    plan = plan_of(chain("k"))
    opts = BuildOptions(log_dir=tmp_path, check_disk=False, revision="abc", proxies={})
    build_plan(c, plan, opts, Progress())
    for record in c.builds:  # base on the OS image's date, children on the label their parent carries
        assert record["buildargs"]["SOURCE_DATE_EPOCH"] == str(EPOCH)
        assert record["buildargs"]["CREATED"] == "2025-12-01T00:00:00Z"
        assert record["labels"][SOURCE_DATE_LABEL] == str(EPOCH)
    c.builds.clear()
    build_plan(c, plan, BuildOptions(log_dir=tmp_path, check_disk=False, proxies={}, created="now", force=True),
               Progress())
    assert all(r["buildargs"]["CREATED"] != "2025-12-01T00:00:00Z" for r in c.builds)
    assert all(r["buildargs"]["SOURCE_DATE_EPOCH"] == str(EPOCH) for r in c.builds)  # file dates stay


def test_created_option_takes_now_or_a_date_and_nothing_else():
    import subprocess
    import sys

    from imagebuild.pipeline.settings import check_created

    assert check_created("now") == "now" and check_created("2026-01-31T12:00:00Z") == "2026-01-31T12:00:00Z"
    res = subprocess.run([sys.executable, "-m", "imagebuild", "build", "--matrix", "images/cpu.yaml", "--created",
                          "last tuesday"], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == ("error: --created 'last tuesday': not 'now' nor an RFC 3339 date such as "
                                  "2026-01-31T12:00:00Z")


# -- same content ----------------------------------------------------------------------------------------------
def _info(layers=("sha256:a", "sha256:b"), labels=None, created="2026-01-01T00:00:00Z", image="sha256:step1"):
    labels = {"io.imagebuild.flavor": "base", "org.opencontainers.image.created": created,
              "org.opencontainers.image.revision": "r1", **(labels or {})}
    return {"Id": "x", "Created": created, "Architecture": "amd64", "Os": "linux", "RootFS": {"Layers": list(layers)},
            "Config": {"Env": ["A=1"], "Cmd": ["bash"], "Labels": labels, "Image": image, "Hostname": "h1"}}


def _history(created="2026-01-01T00:00:00Z", revision="r1"):
    """Newest first: this image's volatile LABEL step, its parent's (built from commit r0), a RUN."""
    return [{"Id": "sha256:1", "Created": 1, "Size": 0,
             "CreatedBy": f"/bin/sh -c #(nop)  LABEL org.opencontainers.image.created={created} "
                          f"org.opencontainers.image.revision={revision}"},
            {"Id": "sha256:2", "Created": 2, "Size": 0,
             "CreatedBy": '/bin/sh -c #(nop)  LABEL org.opencontainers.image.created="2025-12-01T00:00:00Z" '
                          "org.opencontainers.image.revision=r0"},
            {"Id": "sha256:3", "Created": 3, "CreatedBy": "/bin/sh -c apt-get install", "Size": 100}]


def test_same_content_sets_aside_dates_volatile_labels_and_the_step_image_only():
    old = _info()
    new = _info(created="2026-02-02T00:00:00Z", image="sha256:step2", labels={"org.opencontainers.image.revision": "r2"})
    new["Config"]["Hostname"] = "h2"
    assert differences(old, new, _history(), _history("2026-02-02T00:00:00Z", "r2")) == []
    assert differences(old, _info(layers=("sha256:a", "sha256:c")), _history(), _history()) == ["layers"]
    assert differences(old, _info(labels={"io.imagebuild.flavor": "x"}), _history(), _history()) == ["config Labels"]
    env = _info()
    env["Config"]["Env"] = ["A=2"]
    assert differences(old, env, _history(), _history()) == ["config Env"]
    other_steps = _history()
    other_steps[2] = {**other_steps[2], "CreatedBy": "/bin/sh -c apt-get install curl"}
    assert differences(old, _info(), _history(), other_steps) == ["history"]
    no_layers = _info()
    no_layers["RootFS"] = {}
    assert "layers" in differences(no_layers, no_layers, _history(), _history())


def repro_engine() -> FakeEngine:
    """The fake engine, whose builds give every image of a flavor the same layers (a reproduced rebuild)."""
    engine = FakeEngine()
    engine.layers_of = lambda labels: [f"sha256:{labels.get('io.imagebuild.flavor')}"]
    return engine


def test_force_rebuild_with_the_same_content_keeps_the_previous_images_so_children_keep_their_parent(tmp_path):
    c = repro_engine()
    base_ref = "example/os:1@sha256:" + "0" * 64
    c.add_image(base_ref, {})
    plan = plan_of(chain("k"))
    opts = dict(log_dir=tmp_path, check_disk=False, revision="abc", proxies={}, tag_aliases=False)
    first = {r.tag: r.image_id for r in build_plan(c, plan, BuildOptions(**opts), Progress())}
    again = build_plan(c, plan, BuildOptions(force=True, **opts), Progress())
    assert {r.tag: r.image_id for r in again} == first
    assert all(r.status == "built" and r.reproduced_from and r.reproduced_from in c.removed_images for r in again)
    assert all(c.tags[tag] == iid for tag, iid in first.items())
    # the children were built on the kept parent ID, not on the rebuilt one
    runtime_build = [b for b in c.builds if b["tag"].endswith("runtime")][-1]
    assert runtime_build["buildargs"]["BASE_IMAGE"] == first[plan.images[0].tag]


def test_rebuild_with_other_content_replaces_the_previous_image(tmp_path):
    c = repro_engine()
    base_ref = "example/os:1@sha256:" + "0" * 64
    c.add_image(base_ref, {})
    plan = plan_of(chain("k", flavors=("base",)))
    opts = dict(log_dir=tmp_path, check_disk=False, revision="abc", proxies={}, tag_aliases=False)
    first = build_plan(c, plan, BuildOptions(**opts), Progress())[0].image_id
    c.images_by_id[first]["RootFS"] = {"Layers": ["sha256:older"]}
    again = build_plan(c, plan, BuildOptions(force=True, **opts), Progress())[0]
    assert again.image_id != first and again.reproduced_from is None and c.tags[plan.images[0].tag] == again.image_id
