"""An image reference in the form pyxis' `--container-image` and enroot's `docker://` URIs take:
`[REGISTRY#]REPOSITORY[:TAG|@DIGEST]`. enroot splits the registry from the repository with `#` (so a registry with a
port is never read as a tag); without one it asks Docker Hub. Docker Hub references are written without a registry.
"""

from __future__ import annotations

import os

from imagebuild.oci.reference import DOCKER_HUB, Reference
from imagebuild.pasteable import file_argument


def pyxis_image(reference: str) -> str:
    """`127.0.0.1:5000/ml/pytorch:2.13-cpu` -> `127.0.0.1:5000#ml/pytorch:2.13-cpu`; Hub images keep their short
    name (`ubuntu:24.04`, `nvidia/cuda:…`). Raises oci.ReferenceSyntaxError for what is not a reference."""
    ref = Reference.parse(reference)
    suffix = (f":{ref.tag}" if ref.tag else "") + (f"@{ref.digest}" if ref.digest else "")
    if ref.registry == DOCKER_HUB:
        return ref.path.removeprefix("library/") + suffix
    return f"{ref.registry}#{ref.path}{suffix}"


SQUASHFS_SUFFIXES = (".sqsh", ".sqfs", ".squashfs")


def is_file_image(image: str) -> bool:
    """A local squashfs rather than an image reference: a path written as one (`/…`, `./…`, `../…`, `~/…`), a name
    with a squashfs suffix (.sqsh, .sqfs, .squashfs), or a file that is there. A registry reference is never any of
    these (`NAME.sqfs` given for a file here must not become Docker Hub's `NAME.sqfs`)."""
    if image.startswith(("/", "./", "../", "~/")) or image.lower().endswith(SQUASHFS_SUFFIXES):
        return True
    try:
        return os.path.isfile(image) or os.path.islink(image)
    except (OSError, ValueError):  # a name no file system holds (NUL, too long): not a file
        return False


def container_image_flag(image: str) -> str:
    """`--container-image=…` for srun. A file is written absolute: pyxis reads the value as a file only when it
    starts with `.` or `/`, and takes `images/pytorch.sqsh` as a Docker Hub image anyone could publish."""
    text = file_argument(os.path.expanduser(image), "IMAGE") if is_file_image(image) else pyxis_image(image)
    return f"--container-image={text}"
