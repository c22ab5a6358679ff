"""The hardware an image is for, as labels: its target GPUs and the NVIDIA driver it needs.

    io.imagebuild.gpus          "h100=9.0,b200=10.0": the target GPUs and their compute capabilities (runtime and dev;
                                a base image is shared by variants of other targets, so it carries none)
    io.imagebuild.min-driver    "525.60.13": the oldest driver that runs the image's CUDA (compat/data/cuda.yaml:
                                12.x through minor-version compatibility, 13.x from r580), every flavor of a CUDA image
    io.imagebuild.forward-compat, io.imagebuild.forward-compat-min-driver
                                only when the image ships NVIDIA's forward-compatibility package (cuda-compat-X-Y in
                                its apt packages, or an nvidia/cuda base, which installs it): how, and the oldest
                                data-center driver it then runs on (compat/data/gpus.yaml `forward_compat`)

`imagebuild run` and `slurm` read these labels of the image they start (launch/driver.py), never the matrix. A CPU image
carries none of them (its labels, so its inputs hash, are as before).
"""

from __future__ import annotations

from imagebuild.compat.gpus import load as load_gpus
from imagebuild.compat.tables import vtuple
from imagebuild.models import FLAVORS, ResolvedVariant

GPUS_LABEL = "io.imagebuild.gpus"
MIN_DRIVER_LABEL = "io.imagebuild.min-driver"
FORWARD_COMPAT_LABEL = "io.imagebuild.forward-compat"
FORWARD_COMPAT_DRIVER_LABEL = "io.imagebuild.forward-compat-min-driver"
BASE_KEYS = (MIN_DRIVER_LABEL, FORWARD_COMPAT_LABEL, FORWARD_COMPAT_DRIVER_LABEL)  # labels a base image keeps
NVIDIA_CUDA_REPOSITORY = "nvidia/cuda"  # its base images install cuda-compat-X-Y


def gpus_text(pairs: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{name}={cc}" for name, cc in pairs)


def forward_compat(variant: ResolvedVariant, flavor: str) -> str | None:
    """How the image of `flavor` ships a forward-compatibility package, or None."""
    if variant.versions.cuda == "cpu":
        return None
    upto = FLAVORS[: FLAVORS.index(flavor) + 1]  # a flavor holds its parents' packages
    for each in upto:
        for pkg in variant.apt_packages.get(each, ()):
            name = pkg.split("=", 1)[0]
            if name.startswith("cuda-compat"):
                return f"{name} (apt_packages.{each})"
    ref = variant.base.ref or ""
    if variant.base.kind == "registry" and ref.split("@", 1)[0].rsplit(":", 1)[0].endswith(NVIDIA_CUDA_REPOSITORY):
        return f"cuda-compat from the {NVIDIA_CUDA_REPOSITORY} base image"
    return None


def hardware_labels(variant: ResolvedVariant, flavor: str) -> dict[str, str]:
    """The labels above for one image (empty for a CPU image without targets)."""
    labels: dict[str, str] = {}
    if variant.gpus:
        labels[GPUS_LABEL] = gpus_text(variant.gpus)
    if variant.versions.cuda == "cpu" or not variant.min_driver:
        return labels
    labels[MIN_DRIVER_LABEL] = variant.min_driver
    how = forward_compat(variant, flavor)
    floor = load_gpus().forward_compat.get(vtuple(variant.versions.cuda)[0])
    if how and floor:
        labels[FORWARD_COMPAT_LABEL] = how
        labels[FORWARD_COMPAT_DRIVER_LABEL] = floor[0]
    return labels
