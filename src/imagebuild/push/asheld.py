"""An image pushed as the engine holds it: its own manifest and blobs, byte for byte, when they already are what the
push asks for (issue 44: push from where the bytes are).

The BuildKit backend exports zstd layers with OCI media types (builder/backends/buildkit/argv.py) and loads them
into the engine; on the containerd image store the engine keeps those exact blobs and the image's ID is the digest
of that manifest. Compressing them again (push/compress.py) cost the first push of the CPU matrix 8.5x an engine's
own push and gave the registry a manifest of another digest than the image the build made and the tests ran. Here,
when the saved image (`docker save` of the containerd store: an OCI layout with `index.json`) names exactly one image
manifest whose layers all carry the requested compression's media type, that manifest's bytes and its blobs go to
the `dir:` folder unchanged: the pushed digest IS the engine's image ID.

Bound to bytes, nothing trusted by name: the manifest is read by the digest `index.json` gives and must hash to it
(and to the image ID asked for, when that is a manifest digest); the config and every layer are hashed while they
are copied and must match the manifest's descriptor (digest and size). Anything else (the classic store's
`manifest.json`-only archive, gzip layers for a zstd push, an index of several platforms, a foreign media type)
answers None and the caller compresses as before: the classic path keeps what works.

The archive a build kept stays where it is, so its layers are copied out only when the push asks for them, for the
digests the registry lacks (`lazy`, `Prepared.fill`): a push after a one-package rebuild copies that layer, not the
whole image. From the kept layout they are linked where the file system allows and hashed a core each
(engine/held.py `copy_blob`). A kept layer of other bytes found then is dropped for the engine's save (push/skopeo.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from imagebuild.engine.held import (
    BlobProblem,
    BlobSource,
    LayoutImage,
    copy_blob,
    index_entry,
    open_image,
    read_blob,
)
from imagebuild.oci import RegistryError
from imagebuild.oci.answers import image_manifest, is_index
from imagebuild.push.compress import (
    DOCKER_MANIFEST,
    OCI_LAYER,
    OCI_MANIFEST,
    LayerError,
    Prepared,
)

# the manifest and layer media types a push of each compression writes (compress.py writes the same)
MANIFEST_TYPE = {"zstd": OCI_MANIFEST, "gzip": DOCKER_MANIFEST}
MAX_MANIFEST = 4 << 20


def as_held(archive: Path, layout: Path, compression: str, image_id: str = "", *,
            exact: bool = False, lazy: bool = False) -> Prepared | None:
    """The saved image's own manifest and blobs in a `dir:` layout, or None when they are not already the requested
    compression (module doc). LayerError when the archive says one thing and holds another (a blob of other bytes).
    `exact`: an archive kept by the build (engine/held.py) counts only when its manifest IS `image_id` (else None).
    `lazy` (an archive that stays: the build's kept one): the layers are copied only when the push asks for them
    (`Prepared.fill`, with the digests the registry lacks), each hashed as it is: a one-layer rebuild copies one
    layer, not the whole image again (a blob the registry has is its bytes by digest)."""
    with open_image(archive) as tar:
        entry = index_entry(tar)  # None: the classic store's save (no manifest of its own), an index of several
        media = MANIFEST_TYPE.get(compression, "")
        if entry is None or entry.get("mediaType") != media:
            return None
        digest = str(entry["digest"])
        if exact and digest != image_id:
            return None
        try:
            body = read_blob(tar, digest, MAX_MANIFEST)
        except BlobProblem as exc:
            raise LayerError(f"the manifest the saved index.json names: {exc}") from None
        if image_id.startswith("sha256:") and image_id != digest and _is_manifest_id(image_id, tar):
            raise LayerError(f"the engine saved manifest {digest} for image {image_id}")
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict) or is_index(doc, media) or doc.get("mediaType", media) != media:
                return None
            manifest = image_manifest(doc, "the saved manifest")
        except (ValueError, RegistryError):
            return None
        layer_type = OCI_LAYER[compression]
        if not manifest.layers or any(layer.media_type != layer_type for layer in manifest.layers):
            return None
        layout.mkdir(parents=True)
        (layout / "version").write_text("Directory Transport Version: 1.1\n")
        sizes = {d.digest: d.size for d in manifest.layers}
        for desc in ((manifest.config,) if lazy else (manifest.config, *manifest.layers)):
            _copy_into(tar, layout, desc.digest, desc.size)

    def fill(wanted: Collection[str]) -> None:
        """The layers among `wanted` into the layout, each checked against its descriptor."""
        todo = [d for d in sizes if d in wanted and not (layout / d.removeprefix("sha256:")).exists()]
        if todo:
            with open_image(archive) as tar:
                if isinstance(tar, LayoutImage):  # files of their own: hashed side by side, a core each
                    with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
                        list(pool.map(lambda d: _copy_into(tar, layout, d, sizes[d]), todo))
                else:  # one archive read from start to end
                    for d in todo:
                        _copy_into(tar, layout, d, sizes[d])

    (layout / "manifest.json").write_bytes(body)
    return Prepared(layout, digest, body, media, (manifest.config.digest, manifest.config.size),
                    tuple((d.digest, d.size, d.media_type) for d in manifest.layers), compression, reused=0,
                    as_held=True, fill=fill if lazy else None)


def _copy_into(tar: BlobSource, layout: Path, digest: str, size: int) -> None:
    target = layout / digest.removeprefix("sha256:")
    if not target.exists():
        try:
            copy_blob(tar, digest, size, target)
        except BlobProblem as exc:
            raise LayerError(f"the saved image: {exc}") from None


def _is_manifest_id(image_id: str, tar: BlobSource) -> bool:
    """Whether `image_id` names a manifest blob of this archive (the containerd store's IDs are manifest digests;
    the classic store's are config digests, which a manifest legitimately differs from)."""
    try:
        doc = json.loads(read_blob(tar, image_id, MAX_MANIFEST))
    except ValueError:  # (BlobProblem too: no such blob, or not those bytes)
        return False
    return isinstance(doc, dict) and "config" in doc
