"""An image of the local engine, read without running anything of it: a container is created (never started), its
filesystem streamed out with `export` and filtered on the fly, then removed. Works for any image, with or without
python, dpkg or a shell.

Layer sizes come from the engine's history, which lists every build step newest first with the size of the layer it
made; steps that made no layer (ENV, LABEL, ...) are told apart by what made them, as `docker history` does not say.
"""

from __future__ import annotations

import secrets
import tarfile
from typing import TYPE_CHECKING, Any

from imagebuild.engine.store import ImageStore, as_store
from imagebuild.engine.stream import EngineError
from imagebuild.errors import ImagebuildError
from imagebuild.inventory import bundled, dpkg, pydist, tarpick
from imagebuild.inventory.diff import InventoryDiff, diff
from imagebuild.inventory.model import ImageFiles, Inventory, Layer

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

# Dockerfile instructions that never add a layer (classic builder: "/bin/sh -c #(nop)  ENV ..."; BuildKit: "ENV ...")
_METADATA_ONLY = ("ENV", "LABEL", "ARG", "CMD", "ENTRYPOINT", "EXPOSE", "USER", "VOLUME", "STOPSIGNAL",
                  "HEALTHCHECK", "SHELL", "MAINTAINER", "ONBUILD", "WORKDIR")


class ImageNotFound(ImagebuildError):
    """No such image in the engine (exit 1, naming the reference)."""


def diff_images(engine: ImageStore | EngineClient, a: str, b: str) -> InventoryDiff:
    """What changed from local image `a` to local image `b` (tags or IDs): for a build report's "against the image
    the tag pointed at before"."""
    store = as_store(engine)
    return diff(read_local(store, a), read_local(store, b))


def find_image(engine: ImageStore | EngineClient, reference: str) -> dict[str, Any] | None:
    """The engine's inspect data for a tag / ID / name@digest, or None when it has no such image."""
    try:
        return as_store(engine).inspect(reference)
    except EngineError as exc:
        if exc.status in (400, 404):  # 400: not a valid reference at all
            return None
        raise


def read_local(engine: ImageStore | EngineClient, reference: str, inspect: dict[str, Any] | None = None,
               files: ImageFiles | None = None) -> Inventory:
    """The inventory of a local image; `ImageNotFound` when the engine has none by that reference. `files`: what
    read_files gave for this image before (kept with the state): the image's filesystem is then not read again."""
    store = as_store(engine)
    data = inspect if inspect is not None else find_image(store, reference)
    if data is None:
        raise ImageNotFound(f"no image {reference!r} in the local engine")
    image_id = str(data["Id"])
    if files is None:
        files = read_files(store, image_id, reference)
    config = data.get("Config") or {}
    return Inventory(
        reference=reference,
        image_id=image_id,
        created=str(data.get("Created") or ""),
        architecture=str(data.get("Architecture") or ""),
        os=str(data.get("Os") or ""),
        repo_digests=tuple(sorted(data.get("RepoDigests") or ())),
        labels=dict(sorted((config.get("Labels") or {}).items())),
        layers=_layers(store, image_id, list((data.get("RootFS") or {}).get("Layers") or [])),
        size_kind="uncompressed",
        os_release=files.os_release,
        debs=files.debs,
        pythons=files.pythons,
        source="engine",
        bundled=files.bundled,
    )


def read_files(engine: ImageStore | EngineClient, image_id: str, reference: str | None = None) -> ImageFiles:
    """What an inventory reads from the image's files (its whole filesystem streamed by: the slow part);
    ImagebuildError naming `reference` (else the ID) when the engine fails it."""
    try:
        found = _filesystem(as_store(engine), image_id)
    except (EngineError, OSError, tarfile.TarError) as exc:
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise ImagebuildError(f"{reference or image_id}: reading its files from the engine failed: {reason}") from None
    return ImageFiles(os_release=tarpick.os_release(found), debs=tuple(dpkg.read_database(found)),
                      pythons=tuple(pydist.read_distributions(found)), bundled=bundled.read_bundled(found))


def _filesystem(store: ImageStore, image_id: str) -> dict[str, bytes]:
    with store.export(image_id, name=f"imagebuild-inventory-{secrets.token_hex(4)}",
                      labels={"io.imagebuild.purpose": "inventory"}) as chunks:
        return tarpick.collect([(tarpick.read_chunks(chunks), "")])


def _makes_layer(created_by: str) -> bool:
    text = created_by.strip()
    if "#(nop)" in text:  # classic builder: metadata steps are "/bin/sh -c #(nop)  ENV ..."; ADD/COPY make layers
        words = text.split("#(nop)", 1)[1].split()
        return bool(words) and words[0] in ("ADD", "COPY")
    word = text.split(None, 1)[0] if text else ""
    return word not in _METADATA_ONLY


def _layers(store: ImageStore, image_id: str, diff_ids: list[str]) -> tuple[Layer, ...]:
    """diff_ids with sizes from the history (oldest first).

    Every step with a size made a layer; a zero-size RUN/COPY may or may not have (the classic builder drops a RUN
    that changed nothing, keeps one that only deleted files): such steps take a layer while there are more layers
    left than sized steps still to come. Sizes are then right whichever zero-size step took it. When even that does
    not add up, sizes are None rather than guessed."""
    history = list(reversed(store.history(image_id) or []))
    sized_left = sum(1 for h in history if int(h.get("Size") or 0) > 0)
    out: list[Layer] = []
    i = 0
    for h in history:
        size = int(h.get("Size") or 0)
        created_by = str(h.get("CreatedBy") or "")
        if size > 0:
            sized_left -= 1
        elif not _makes_layer(created_by) or len(diff_ids) - i <= sized_left:
            continue
        if i >= len(diff_ids):
            return tuple(Layer(d, None) for d in diff_ids)
        out.append(Layer(diff_ids[i], size, created_by))
        i += 1
    if i != len(diff_ids):
        return tuple(Layer(d, None) for d in diff_ids)
    return tuple(out)
