"""A local image's files read layer by layer from the archive its BuildKit build kept (inventory/layered.py): the same
files as the whole layers give, each layer's picks kept by diff ID and reused by the next image that shares the layer,
every byte checked (the blob against its descriptor, the tar against its diff ID), nothing kept from a layer that
fails, and the engine read as before when no archive of exactly that image is kept."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
import zstandard
from _oci_saves import digest_of

from imagebuild.engine import held
from imagebuild.inventory import dpkg, layered, pydist, tarpick
from imagebuild.inventory.model import ImageFiles
from imagebuild.pipeline.keptfiles import image_files
from imagebuild.record.derived import Derived

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
SITE = "usr/lib/python3/dist-packages"
STATUS = b"Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\nArchitecture: amd64\n\n"


def _tar(entries: list[tuple[str, bytes | str | None]]) -> bytes:
    """A layer: (path, bytes) a file, (path, "->target") a hard link, (path, None) a directory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.LNKTYPE, data[2:]
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _meta(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()


OS_LAYER = _tar([("etc/", None), ("etc/os-release", b'ID=debian\nVERSION_ID="12"\n'),
                 ("var/lib/dpkg/status", STATUS), ("usr/share/doc/libc6/copyright", b"Format: x copyright-format\n"),
                 ("usr/bin/big", b"\0" * (tarpick.MAX_FILE + 1)), (f"{SITE}/", None),
                 (f"{SITE}/foo-1.0.dist-info/METADATA", _meta("foo", "1.0")),
                 (f"{SITE}/old-0.1.dist-info/METADATA", _meta("old", "0.1")),
                 (f"{SITE}/linked-3.0.dist-info/METADATA", "->" + f"{SITE}/foo-1.0.dist-info/METADATA")])
PIP_LAYER = _tar([(f"{SITE}/.wh.foo-1.0.dist-info", b""), (f"{SITE}/bar-2.0.dist-info/METADATA", _meta("bar", "2.0")),
                  ("opt/venv/lib/python3.11/site-packages/torch-2.13.0.dist-info/METADATA", _meta("torch", "2.13.0"))])
OPAQUE_LAYER = _tar([("opt/venv/lib/python3.11/site-packages/.wh..wh..opq", b""),
                     ("opt/venv/lib/python3.11/site-packages/six-1.17.0.dist-info/METADATA", _meta("six", "1.17.0"))])


def _archive(root: Path, layers: list[tuple[bytes, str]], *, tamper: str = "") -> str:
    """A kept build export (engine/held.py: its blobs in the layout as BuildKit writes them, its kept index) under `root`; the
    image ID (its manifest's digest)."""
    blobs: dict[str, bytes] = {}
    descriptors = []
    for plain, media in layers:
        packed = zstandard.ZstdCompressor().compress(plain) if media == ZSTD else gzip.compress(plain, mtime=0)
        stored = packed  # "blob": the archive holds other bytes under the digest its manifest names
        if tamper == "blob" and plain is layers[-1][0]:
            stored = zstandard.ZstdCompressor().compress(plain + b"\0" * 1024)
        blobs[digest_of(packed)] = stored
        descriptors.append({"mediaType": media, "digest": digest_of(packed), "size": len(packed)})
    diff_ids = [digest_of(plain) for plain, _ in layers]
    if tamper == "diff_id":
        diff_ids[-1] = digest_of(b"another layer")
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}})
    blobs[digest_of(config.encode())] = config.encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": descriptors,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": digest_of(config.encode()), "size": len(config)}}).encode()
    image_id = digest_of(manifest)
    blobs[image_id] = manifest
    index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, "digest": image_id,
                                                           "size": len(manifest)}]}).encode()
    layout = held.layout_root(root) / "blobs" / "sha256"
    layout.mkdir(parents=True, exist_ok=True)
    for d, b in blobs.items():  # as BuildKit's export into the layout leaves them (a tampered blob keeps its name)
        (layout / d[7:]).write_bytes(b)
    (root / f"{image_id[7:]}.json").write_bytes(index)
    return image_id


class Picks:
    """A PicksStore that counts what was read from the archive (put) and reused (get)."""

    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}
        self.puts: list[str] = []

    def get(self, diff_id: str) -> bytes | None:
        return self.kept.get(diff_id)

    def put(self, diff_id: str, picks: bytes) -> None:
        self.puts.append(diff_id)
        self.kept[diff_id] = picks


def _whole(layers: list[bytes]) -> dict[str, bytes]:
    """What the whole layers give through the reader every other image path uses (registry images)."""
    return tarpick.collect([(io.BytesIO(p), "") for p in layers])


def test_the_folded_picks_are_the_files_the_whole_layers_give(tmp_path):
    layers = [(OS_LAYER, ZSTD), (PIP_LAYER, GZIP), (OPAQUE_LAYER, ZSTD)]
    image_id = _archive(tmp_path / "held", layers)
    files = layered.held_files(image_id, Picks(), tmp_path / "held")
    assert files is not None
    whole = _whole([p for p, _ in layers])
    assert files == ImageFiles(os_release=tarpick.os_release(whole), debs=tuple(dpkg.read_database(whole)),
                               pythons=tuple(pydist.read_distributions(whole)), bundled=())
    assert files.os_release.version_id == "12"
    assert [(d.name, d.version) for d in files.debs] == [("libc6", "2.36-9")]
    # the whiteout removed foo's folder (the hard link made in the same lower layer still reads its METADATA); the
    # opaque marker hid torch, which a lower layer put in that folder
    assert sorted((p.name, p.version) for p in files.pythons) == [("bar", "2.0"), ("foo", "1.0"), ("old", "0.1"),
                                                                   ("six", "1.17.0")]


def test_a_layer_read_once_is_reused_by_the_next_image_that_shares_it(tmp_path):
    picks = Picks()
    first = _archive(tmp_path / "held", [(OS_LAYER, ZSTD), (PIP_LAYER, ZSTD)])
    layered.held_files(first, picks, tmp_path / "held")
    assert picks.puts == [digest_of(OS_LAYER), digest_of(PIP_LAYER)]
    second = _archive(tmp_path / "held", [(OS_LAYER, ZSTD), (PIP_LAYER, ZSTD), (OPAQUE_LAYER, ZSTD)])
    files = layered.held_files(second, picks, tmp_path / "held")
    assert picks.puts[2:] == [digest_of(OPAQUE_LAYER)]  # the new layer only
    assert files is not None and "six" in {p.name for p in files.pythons}
    picks_tar = picks.kept[digest_of(OS_LAYER)]
    assert len(picks_tar) < len(OS_LAYER) / 10  # the big file and the directories are not kept


@pytest.mark.parametrize("tamper, says", [("blob", "holds other bytes"), ("diff_id", "not its diff ID")])
def test_a_layer_of_other_bytes_is_refused_and_nothing_of_it_kept(tmp_path, tamper, says):
    image_id = _archive(tmp_path / "held", [(OS_LAYER, ZSTD), (PIP_LAYER, ZSTD)], tamper=tamper)
    picks = Picks()
    with pytest.raises(layered.LayerProblem, match=says):
        layered.held_files(image_id, picks, tmp_path / "held")
    assert digest_of(PIP_LAYER) not in picks.kept


def test_no_archive_or_another_images_answers_none(tmp_path):
    image_id = _archive(tmp_path / "held", [(OS_LAYER, ZSTD)])
    other = "sha256:" + "ab" * 32
    assert layered.held_files(other, Picks(), tmp_path / "held") is None
    (tmp_path / "held" / f"{image_id[7:]}.json").rename(tmp_path / "held" / f"{other[7:]}.json")
    assert layered.held_files(other, Picks(), tmp_path / "held") is None  # its index names another manifest


def test_a_damaged_archive_is_one_warning_and_the_engine_is_read_instead(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    image_id = _archive(tmp_path / "cache" / "held", [(OS_LAYER, ZSTD), (PIP_LAYER, ZSTD)], tamper="blob")
    said: list[str] = []
    read: list[str] = []
    monkeypatch.setattr("imagebuild.inventory.read_files", lambda client, i: read.append(i) or ImageFiles())
    files = image_files(object(), Derived(tmp_path / "state", said.append), image_id)
    assert read == [image_id] and files == ImageFiles()
    assert len(said) == 1 and said[0].startswith("warning: ") and "holds other bytes" in said[0]
    assert "reading the image from the engine instead" in said[0]


def test_the_state_keeps_each_layers_picks_and_the_next_run_reads_no_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_LAYER_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    first = _archive(tmp_path / "cache" / "held", [(OS_LAYER, ZSTD), (PIP_LAYER, ZSTD)])
    kept = Derived(tmp_path / "state", said.append)
    image_files(object(), kept, first)
    second = _archive(tmp_path / "cache" / "held", [(OS_LAYER, ZSTD), (PIP_LAYER, ZSTD), (OPAQUE_LAYER, ZSTD)])
    # the first image's layers, damaged in the second archive, are not read again: their picks are kept
    calls: list[int] = []
    real = layered._read_layer
    monkeypatch.setattr(layered, "_read_layer", lambda *a: calls.append(1) or real(*a))
    files = image_files(object(), kept, second)
    assert calls == [1] and said == []
    assert {p.name for p in files.pythons} == {"bar", "foo", "old", "six"}
