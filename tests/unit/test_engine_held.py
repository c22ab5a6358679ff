"""engine/held.py + the push's use of it: a BuildKit build's export kept in the layout under the image ID it became
(only when the layout holds that manifest and its blobs), found again by that ID and read as an archive is, pruned
oldest first (never while a build exports), loaded into the engine without what it holds; `Skopeo.prepare` sends a
kept image without asking the engine to save anything, and drops a damaged one for the engine's save."""

from __future__ import annotations

import json
import os
import tarfile

import pytest
from _fake_engine import FakeEngine
from _oci_saves import digest_of, keep_in_layout, saved_layout

from imagebuild.engine import held
from imagebuild.push.compress import LayerCache
from imagebuild.push.skopeo import CopyError, Skopeo


def test_keep_names_the_layouts_manifest_by_its_image_id_and_find_gives_it_back(tmp_path):
    archive, digest, manifest = saved_layout(tmp_path)
    root = tmp_path / "held"
    kept = keep_in_layout(archive, root)
    assert kept == root / f"{digest.removeprefix('sha256:')}.json"
    assert held.find(digest, root) == kept
    assert held.find("sha256:" + "0" * 64, root) is None and held.find("not-an-id", root) is None
    with held.open_image(kept) as image:  # read as an archive is read: the index, then blobs by digest
        assert held.index_entry(image)["digest"] == digest
        assert held.read_blob(image, digest, 1 << 20) == manifest
        with pytest.raises(held.BlobProblem, match="lacks"):  # a digest that walks out of the layout is no blob
            held.blob_member(image, "sha256:../../../etc/passwd")


def test_another_images_manifest_or_a_missing_blob_is_not_kept(tmp_path):
    archive, digest, _ = saved_layout(tmp_path)
    root = tmp_path / "held"
    keep_in_layout(archive, root)
    assert not held.keep("sha256:" + "1" * 64, root)  # no such manifest in the layout
    assert not held.keep("busybox:latest", root)
    layer = next(p for p in (held.layout_root(root) / "blobs" / "sha256").iterdir() if p.name != digest[7:])
    layer.unlink()  # the config or a layer gone: nothing a push could send whole
    (root / f"{digest[7:]}.json").unlink()
    assert not held.keep(digest, root) and held.find(digest, root) is None


def test_prune_forgets_the_least_recently_used_and_removes_blobs_no_kept_image_references(tmp_path, monkeypatch):
    root = tmp_path / "held"
    kept = []
    for n in range(3):
        folder = tmp_path / f"image{n}"
        folder.mkdir()
        archive, _, _ = saved_layout(folder, names=(f"a{n}", f"b{n}"))
        path = keep_in_layout(archive, root)
        os.utime(path, (1000 + n, 1000 + n))
        kept.append(path)
    stray = held.add_blob(held.layout_root(root), b"a blob no image references")
    sizes = sum(p.stat().st_size for p in (held.layout_root(root) / "blobs" / "sha256").iterdir())
    monkeypatch.setenv("IMAGEBUILD_HELD_MAX", str(sizes * 2 // 3))
    with held.exporting(root):  # a build exporting: nothing is removed
        held.prune(root, keep_path=kept[0])
    assert all(p.exists() for p in kept) and stray[7:] in {p.name for p in (held.layout_root(root) / "blobs" /
                                                                             "sha256").iterdir()}
    held.prune(root, keep_path=kept[0])
    assert kept[0].exists() and not kept[1].exists() and kept[2].exists()  # the oldest kept: it is in use
    left = held.layout_blobs(held.layout_root(root))
    assert stray not in left
    for path in (kept[0], kept[2]):  # every blob of a kept image is still there
        with held.open_image(path) as image:
            doc = json.loads(held.read_blob(image, "sha256:" + path.stem, 1 << 20))
        assert {d["digest"] for d in (doc["config"], *doc["layers"])} <= left


def test_the_load_archive_leaves_out_what_the_engine_holds_and_names_the_image(tmp_path):
    archive, digest, manifest = saved_layout(tmp_path)
    root = tmp_path / "held"
    keep_in_layout(archive, root)
    layout = held.layout_root(root)
    doc = json.loads(manifest)
    first = doc["layers"][0]["digest"]
    descriptor = {"mediaType": doc["mediaType"], "digest": digest, "size": len(manifest),
                  "platform": {"architecture": "amd64", "os": "linux"}}
    target = tmp_path / "load.tar"
    held.load_archive(layout, descriptor, "reg.example:5000/ml/torch:2.13-runtime", target, leave_out={first})
    with tarfile.open(target) as tar:
        names = set(tar.getnames())
        index = json.loads(tar.extractfile("index.json").read())
    assert names == {"oci-layout", "index.json", *(f"blobs/sha256/{d[7:]}" for d in
                                                  (digest, doc["config"]["digest"], doc["layers"][1]["digest"]))}
    [entry] = index["manifests"]
    assert entry["digest"] == digest and entry["annotations"]["io.containerd.image.name"] == \
        "reg.example:5000/ml/torch:2.13-runtime" and entry["annotations"]["org.opencontainers.image.ref.name"] == \
        "2.13-runtime"
    (layout / "blobs" / "sha256" / doc["layers"][1]["digest"][7:]).unlink()
    with pytest.raises(held.BlobProblem, match="lacks"):
        held.load_archive(layout, descriptor, None, target)


class _NoSave(FakeEngine):
    def save(self, image):  # type: ignore[override]
        raise AssertionError("the engine was asked to save an image the build kept")


def _prepared_from_kept(tmp_path, monkeypatch):
    """A push's prepare of an image whose archive the build kept, on an engine that must not be asked to save it:
    (prepared, the image ID, its manifest)."""
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    archive, digest, manifest = saved_layout(tmp_path)
    keep_in_layout(archive, held.held_root())
    return Skopeo(_NoSave(), cache=LayerCache(tmp_path / "cache")).prepare(digest, "zstd"), digest, manifest


def test_prepare_sends_the_kept_archive_and_never_asks_the_engine(tmp_path, monkeypatch):
    prepared, digest, manifest = _prepared_from_kept(tmp_path, monkeypatch)
    assert prepared.as_held and prepared.digest == digest and prepared.manifest == manifest
    assert held.find(digest) is not None  # still kept: the next push of it is as cheap


def test_a_damaged_kept_archive_is_dropped_for_the_engines_save(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    engine = FakeEngine()
    image_id = engine.add_image("reg:5000/x:1", {})
    archive, digest, _ = saved_layout(tmp_path, tamper="layer")
    # the tampered image, kept as if it were this image's: its manifest is another digest -> not used
    kept = keep_in_layout(archive, tmp_path / "cache" / "held", as_id=image_id)
    logs: list[str] = []
    prepared = Skopeo(engine, cache=LayerCache(tmp_path / "cache"), log=logs.append).prepare(image_id, "zstd")
    assert not prepared.as_held  # the fake engine's classic-store save, compressed
    assert kept.exists()  # not this image (exact): left alone, not trusted


def test_a_kept_archive_of_other_bytes_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    engine = FakeEngine()
    archive, digest, _ = saved_layout(tmp_path, tamper="layer")
    keep_in_layout(archive, held.held_root())
    engine_id = engine.add_image("reg:5000/x:1", {})
    logs: list[str] = []
    copier = Skopeo(engine, cache=LayerCache(tmp_path / "cache"), log=logs.append)
    # its manifest and config are this image's; the damaged layer shows when the push asks for it
    prepared = copier._from_kept(digest, tmp_path / "layout", "zstd")
    assert prepared is not None and prepared.fill is not None
    assert sorted(p.name for p in (tmp_path / "layout").iterdir()) == sorted(
        ["manifest.json", "version", prepared.config[0].removeprefix("sha256:")])  # no layer copied yet
    with pytest.raises(CopyError, match="cannot be saved from the engine"):  # the fake engine has no such image
        prepared.fill([d for d, _, _ in prepared.layers])
    assert held.find(digest) is None and any("not this image" in line for line in logs)
    assert not copier.prepare(engine_id, "zstd").as_held  # the engine's save, compressed as before


def test_only_the_layers_the_registry_lacks_are_copied_out_of_the_kept_archive(tmp_path, monkeypatch):
    prepared, _, _ = _prepared_from_kept(tmp_path, monkeypatch)
    assert prepared.fill is not None
    first, second = (d for d, _, _ in prepared.layers)
    prepared.fill([second])
    assert not (prepared.layout / first.removeprefix("sha256:")).exists()
    assert digest_of((prepared.layout / second.removeprefix("sha256:")).read_bytes()) == second


def test_the_kept_layouts_layers_are_linked_and_hashed_where_the_file_system_allows(tmp_path, monkeypatch):
    prepared, _, _ = _prepared_from_kept(tmp_path, monkeypatch)
    wanted = [d for d, _, _ in prepared.layers]
    assert prepared.fill is not None and len(wanted) > 1  # (side by side: one thread a layer)
    prepared.fill(wanted)
    layout = held.layout_root()
    for d in wanted:  # the same file (one inode), the image's own bytes
        sent, kept = prepared.layout / d.removeprefix("sha256:"), held.blob_path(layout, d)
        assert os.stat(sent).st_ino == os.stat(kept).st_ino and digest_of(sent.read_bytes()) == d


def test_a_file_system_that_will_not_link_gets_copies_of_the_same_bytes(tmp_path, monkeypatch):
    prepared, _, _ = _prepared_from_kept(tmp_path, monkeypatch)

    def cross_device(*_args):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(held.os, "link", cross_device)
    wanted = [d for d, _, _ in prepared.layers]
    assert prepared.fill is not None
    prepared.fill(wanted)
    for d in wanted:
        sent, kept = prepared.layout / d.removeprefix("sha256:"), held.blob_path(held.layout_root(), d)
        assert os.stat(sent).st_ino != os.stat(kept).st_ino and digest_of(sent.read_bytes()) == d
        assert not sent.with_name(sent.name + ".partial").exists()


def test_a_linked_layer_of_other_bytes_is_refused_and_its_link_removed(tmp_path, monkeypatch):
    """The kept file changed after the build kept it: the link is hashed, refused, removed, and the kept file is left
    as it is (the push then takes the engine's save: test_a_damaged_kept_layer_is_taken_…)."""
    archive, digest, _ = saved_layout(tmp_path)
    keep_in_layout(archive, tmp_path / "held")
    kept = held.find(digest, tmp_path / "held")
    assert kept is not None
    with held.open_image(kept) as image:
        manifest = json.loads(held.read_blob(image, digest, 1 << 20))
        layer = manifest["layers"][0]
        path = held.blob_path(tmp_path / "held" / held.LAYOUT, layer["digest"])
        path.write_bytes(b"x" * layer["size"])
        target = tmp_path / "out"
        with pytest.raises(held.BlobProblem, match="other bytes"):
            held.copy_blob(image, layer["digest"], layer["size"], target)
    assert not target.exists() and not (tmp_path / "out.partial").exists()
    assert path.read_bytes() == b"x" * layer["size"]


class _Saves(FakeEngine):
    """An engine whose save of the one image is `data` (the same image the kept archive damaged)."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data, self.saved = data, 0

    def save(self, image):  # type: ignore[override]
        self.saved += 1
        yield self.data


def test_a_damaged_kept_layer_is_taken_from_the_engines_save_of_the_same_image(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path / "push"))
    (tmp_path / "push").mkdir()
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    good, digest, _ = saved_layout(tmp_path / "good")
    bad, bad_digest, _ = saved_layout(tmp_path / "bad", tamper="layer")
    assert bad_digest == digest and keep_in_layout(bad, held.held_root()).exists()
    engine, logs = _Saves(good.read_bytes()), []
    prepared = Skopeo(engine, cache=LayerCache(tmp_path / "cache"), log=logs.append).prepare(digest, "zstd")
    wanted = [d for d, _, _ in prepared.layers]
    assert prepared.fill is not None
    prepared.fill(wanted)
    assert engine.saved == 1 and any("not this image" in line for line in logs) and held.find(digest) is None
    for d in wanted:  # every layer the push sends is the image's own bytes
        assert digest_of((prepared.layout / d.removeprefix("sha256:")).read_bytes()) == d
