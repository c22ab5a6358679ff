"""`imagebuild export`: a built image as an enroot/pyxis `.sqsh` (its files from a container that never starts,
enroot's /etc files from the image config, packed with gzip, the same image giving the same bytes) or as a
`docker save` archive for Apptainer, and `--check` of a `.sqsh`. Engine calls live in engine/rootfs.py.
"""

from imagebuild.export.squashfs import COMPRESSIONS, check
from imagebuild.export.writer import (
           FORMATS,
           ExportError,
           ExportResult,
           Progress,
           export_archive,
           export_squashfs,
)

__all__ = ["COMPRESSIONS", "FORMATS", "ExportError", "ExportResult", "Progress", "check", "export_archive",
           "export_squashfs"]
