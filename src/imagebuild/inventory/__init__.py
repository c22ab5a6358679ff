"""What is really inside an image: its dpkg database, installed Python distributions, labels and layers, read from
its files without running anything of it (`read_local`: the engine; `read_registry`: a registry, no engine), and
what is made of that: a CycloneDX SBOM (`make_sbom`) and a diff of two images (`diff`, `format_diff`).

    from imagebuild.engine import connect
    from imagebuild.inventory import diff, format_diff, read_local
    client = connect("inspect")
    print(format_diff(diff(read_local(client, old_id), read_local(client, new_id))))
    print(format_diff(diff_images(client, old_id, new_id)))      # the same, in one call

Nothing here imports docker at import time (local.py imports it inside its functions).
"""

from imagebuild.inventory.cyclonedx import dumps as dump_sbom
from imagebuild.inventory.cyclonedx import make_sbom
from imagebuild.inventory.diff import Change, InventoryDiff, LayerRow, diff, diff_to_json, format_diff
from imagebuild.inventory.from_registry import read_registry
from imagebuild.inventory.local import ImageNotFound, diff_images, find_image, read_files, read_local
from imagebuild.inventory.model import (
    DebPackage,
    ImageFiles,
    Inventory,
    Layer,
    OSRelease,
    PyDist,
    normalize_name,
)

__all__ = [
    "Change", "DebPackage", "ImageFiles", "ImageNotFound", "Inventory", "InventoryDiff", "Layer", "LayerRow", "OSRelease",
    "PyDist", "diff", "diff_images", "diff_to_json", "dump_sbom", "find_image", "format_diff", "make_sbom",
    "normalize_name", "read_files", "read_local", "read_registry",
]
