"""A local image's inventory with its files part kept once per image ID beside the record (record/derived.py: the
files it parses, `inventory-files-<key>`): what `build`'s SBOMs, its rebuild diffs, `plan --security`'s and the audit's
inventories, and the `sbom` and `diff` commands read. Apart from supply.py so that those two commands do not load the
builder."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from imagebuild.record.derived import MAX_KEPT_BYTES, Derived, key_of

if TYPE_CHECKING:
    from imagebuild.inventory import ImageFiles, Inventory

FILES = "inventory-files-"  # the kept files' name (record/derived.py): this and a key
PICKS = "layer-picks-"  # a layer's picks (inventory/layered.py), kept by its diff ID: this and a key


class _LayerPicks:
    """inventory.layered.PicksStore over the state's derived files: a layer's picks under its diff ID."""

    def __init__(self, kept: Derived) -> None:
        from imagebuild.inventory import layered

        self.kept, self.name = kept, PICKS + key_of(layered.FORMAT)

    def get(self, diff_id: str) -> bytes | None:
        return self.kept.get(diff_id, self.name)

    def put(self, diff_id: str, picks: bytes) -> None:
        if len(picks) <= MAX_KEPT_BYTES:  # a bigger file would not be read back
            self.kept.put(diff_id, self.name, picks, kind=PICKS)


def image_files(client: Any, kept: Derived, image_id: str) -> ImageFiles:
    """What an inventory reads from the image's filesystem: kept, else read and kept. Read layer by layer from the
    archive its BuildKit build kept, each layer's picks kept by diff ID (inventory/layered.py: a rebuild reads its new
    layers only), else the whole image streamed from the engine."""
    from imagebuild.inventory import kept as codec
    from imagebuild.inventory import layered, read_files

    name = FILES + key_of(codec.FORMAT)
    data = kept.get(image_id, name)
    if data is not None:
        try:
            return codec.loads(data)
        except ValueError as exc:
            kept.discard(image_id, name, str(exc))
    files = None
    try:
        files = layered.held_files(image_id, _LayerPicks(kept))
    except layered.LayerProblem as exc:
        kept.warn(f"warning: {image_id[:19]}: {exc}; reading the image from the engine instead")
    if files is None:
        files = read_files(client, image_id)
    kept.put(image_id, name, codec.dumps(files), kind=FILES)
    return files


def kept_files_of(warn: Callable[[str], None]) -> Callable[[Any, str], ImageFiles] | None:
    """For `sbom` and `diff` (inventory.open.Opener's files_of): a local image's files as kept with the state
    (IMAGEBUILD_STATE_DIR, else .imagebuild/) by whatever read that image ID before — a build's SBOM — else read from
    the image and kept there. None when there is no state folder (nothing was built here): the image is read, and a
    command that only reads leaves no folder behind."""
    from imagebuild.record.store import state_dir

    if not state_dir().is_dir():
        return None
    kept = Derived(None, warn)
    return lambda client, image_id: image_files(client, kept, image_id)


def local_inventory(client: Any, kept: Derived, image_id: str, inspect: dict[str, Any] | None = None) -> Inventory:
    """The inventory of a local image, its files part kept once per image ID (image_files)."""
    from imagebuild.inventory import ImageNotFound, find_image, read_local

    info = inspect if inspect is not None else find_image(client, image_id)
    if info is None:
        raise ImageNotFound(f"no image {image_id!r} in the local engine")
    return read_local(client, image_id, info, files=image_files(client, kept, image_id))
