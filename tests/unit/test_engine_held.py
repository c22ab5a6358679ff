"""engine/held.py + the push's use of it: a BuildKit build's exported archive kept under the image ID it became (only
when its index.json names exactly that manifest), found again by that ID, pruned oldest first; `Skopeo.prepare`
sends a kept archive without asking the engine to save anything, and drops a damaged one for the engine's save."""

from __future__ import annotations

import os
import tarfile

import pytest
from _fake_engine import FakeEngine
from _oci_saves import digest_of, saved_layout

from imagebuild.engine import held
from imagebuild.push.compress import LayerCache
from imagebuild.push.skopeo import CopyError, Skopeo


def test_keep_moves_the_archive_under_its_image_id_and_find_gives_it_back(tmp_path):
    archive, digest, _ = saved_layout(tmp_path)
    root = tmp_path / "held"
    assert held.keep(archive, digest, root)
    kept = root / f"{digest.removeprefix('sha256:')}.tar"
    assert kept.exists() and not archive.exists()
    assert held.find(digest, root) == kept
    assert held.find("sha256:" + "0" * 64, root) is None and held.find("not-an-id", root) is None


def test_another_images_archive_or_a_bad_one_is_not_kept(tmp_path):
    archive, digest, _ = saved_layout(tmp_path)
    root = tmp_path / "held"
    assert not held.keep(archive, "sha256:" + "1" * 64, root)  # its manifest is not that image
    assert not held.keep(archive, "busybox:latest", root)
    broken = tmp_path / "broken.tar"
    broken.write_bytes(b"not a tar")
    assert not held.keep(broken, digest, root)
    assert archive.exists() and not list(root.glob("*.tar"))


def test_prune_removes_the_least_recently_used_beyond_the_limit(tmp_path, monkeypatch):
    root = tmp_path / "held"
    root.mkdir()
    paths = []
    for n in range(3):
        path = root / f"{n:064x}.tar"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1000 + n, 1000 + n))
        paths.append(path)
    monkeypatch.setenv("IMAGEBUILD_HELD_MAX", "2500")
    held.prune(root, keep_path=paths[0])
    assert paths[0].exists() and not paths[1].exists() and paths[2].exists()  # the oldest kept: it is in use


class _NoSave(FakeEngine):
    def save(self, image):  # type: ignore[override]
        raise AssertionError("the engine was asked to save an image the build kept")


def _prepared_from_kept(tmp_path, monkeypatch):
    """A push's prepare of an image whose archive the build kept, on an engine that must not be asked to save it:
    (prepared, the image ID, its manifest)."""
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    archive, digest, manifest = saved_layout(tmp_path)
    assert held.keep(archive, digest)
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
    kept = tmp_path / "cache" / "held" / f"{image_id.removeprefix('sha256:')}.tar"
    kept.parent.mkdir(parents=True)
    # the tampered archive, renamed as if it were this image's: its manifest is another digest -> not used
    archive.rename(kept)
    logs: list[str] = []
    prepared = Skopeo(engine, cache=LayerCache(tmp_path / "cache"), log=logs.append).prepare(image_id, "zstd")
    assert not prepared.as_held  # the fake engine's classic-store save, compressed
    assert tarfile.is_tarfile(kept)  # not this image (exact): left alone, not trusted


def test_a_kept_archive_of_other_bytes_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    engine = FakeEngine()
    archive, digest, _ = saved_layout(tmp_path, tamper="layer")
    assert held.keep(archive, digest)
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
    assert bad_digest == digest and held.keep(bad, digest)
    engine, logs = _Saves(good.read_bytes()), []
    prepared = Skopeo(engine, cache=LayerCache(tmp_path / "cache"), log=logs.append).prepare(digest, "zstd")
    wanted = [d for d, _, _ in prepared.layers]
    assert prepared.fill is not None
    prepared.fill(wanted)
    assert engine.saved == 1 and any("not this image" in line for line in logs) and held.find(digest) is None
    for d in wanted:  # every layer the push sends is the image's own bytes
        assert digest_of((prepared.layout / d.removeprefix("sha256:")).read_bytes()) == d
