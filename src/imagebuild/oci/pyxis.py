"""An image reference in the form pyxis' `--container-image` and enroot's `docker://` URIs take:
`[REGISTRY#]REPOSITORY[:TAG|@DIGEST]`. enroot splits the registry from the repository with `#` (so a registry with a
port is never read as a tag); without one it asks Docker Hub. Docker Hub references are written without a registry.
"""

from __future__ import annotations

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


def is_file_image(image: str) -> bool:
    """A `.sqsh` file (or any path written as one) rather than an image reference."""
    return image.startswith(("/", "./", "../")) or image.endswith(".sqsh")


def container_image_flag(image: str) -> str:
    """`--container-image=…` for srun. A file is written absolute: pyxis reads the value as a file only when it
    starts with `.` or `/`, and takes `images/pytorch.sqsh` as a Docker Hub image anyone could publish."""
    text = file_argument(image, "IMAGE") if is_file_image(image) else pyxis_image(image)
    return f"--container-image={text}"
