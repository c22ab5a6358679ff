"""The runtime image's environment layers (tiers), least changing first: which ones an image has and what each holds.

One home for the tier table: the render (the Dockerfile's tier stages, the spec the resolve stage splits the
environment by), `plan` and the build report (which layer holds what) all read it from here. Which package lands in
which tier is decided at build time by `imagebuild.render.tiering` (shipped into the resolve stage), from the ONE
resolution of the whole environment. A tier with nothing to hold (no nvidia wheels on CPU, no torchvision/torchaudio,
no transformer_engine, no matrix packages) is not rendered: no stage, no layer.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.lock.model import canonical_name
from imagebuild.models import ResolvedVariant

SCRIPT = "files/imagebuild-tiers.py"  # context paths of the resolve stage's script and spec
SPEC = "files/imagebuild-tiers.json"
# Where each tier's pinned file sits in the image (in its own layer): what the layer holds, readable without pip.
LIST_DIR = "/opt/venv/.imagebuild-layers"
# The runtime's part that a matrix edit does not change (issue 44: rebuild only what changed): the compilers and
# every tier below the matrix's own packages, in a stage of its own (ENV_STAGE) that the final stage is FROM through
# the global ARG ENV_ARG (its default: that stage). One build (the classic builder, `buildx bake`) builds it in line;
# the BuildKit backend builds it as an image of its own, keyed by ENV_KEY_STAGE's files (the env tiers' pinned
# lists) and found again by that key, so that BuildKit's re-timestamping and export skip its layers as they skip a
# parent image's (builder/backends/buildkit/envimage.py). The same layers either way: the same image ID.
ENV_STAGE = "env"
ENV_KEY_STAGE = "env-key"
ENV_ARG = "ENV_IMAGE"
MATRIX_PREFIX = "matrix-"


@dataclass(frozen=True)
class Tier:
    """One environment layer. `owns`: the package-name globs that are this tier's whatever depends on them;
    `requires`: what the tier asks pip for; `holds`: what it holds, in words (plan, report, Dockerfile comment)."""

    name: str
    holds: str
    owns: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    te_wheels: bool = False  # installs from the cached transformer_engine wheel (context te-wheels/)

    @property
    def nvidia(self) -> bool:
        """One of the NVIDIA_TIERS: its stage lists the CUDA libraries the stages above link their copies to."""
        return self in NVIDIA_TIERS

    def spec(self) -> dict[str, object]:
        return {"name": self.name, "owns": list(self.owns), "requires": list(self.requires)}


# The CUDA wheels (nvidia-*) in five layers of 0.24-0.56 GB compressed (the CUDA 13 runtime), least changing first,
# not one of 1.87 GB (bench/loop-cuda.md round 25):
# - the blobs travel side by side: the signed push of that runtime took 10.2 s against 12.3 s (medians of 3), and a
#   node, which applies a layer only once its blob is whole, pulled it in 30.6 s against 32.5 s (containerd 1.7's
#   serial applies keep that gain small);
# - a torch release that moves some of its nvidia-* pins (a new cuDNN or NCCL) replaces those tiers' layers alone:
#   the others keep their digests, and a node that held the image pulls the changed ones (0.24-0.56 GB each), not
#   every CUDA library again;
# - no layer nears a registry's layer limit (push's --layer-limit) as the libraries grow.
# A wheel goes to the tier whose pattern names it most closely (tiering.owner): `nvidia` holds the rest of the CUDA
# library wheels (nvidia-cu*, nvJitLink, NVTX). Other nvidia-* packages a matrix asks for (nvidia-ml-py,
# nvidia-dali-*, nvidia-modelopt) are owned by no tier: like any package, each goes to the lowest tier that needs it,
# so adding one to the matrix adds its own layer and leaves the CUDA layers as they were.
NVIDIA_TIERS = (
    Tier("nvidia", "the CUDA runtime, NVRTC, nvJitLink, cuRAND, cuFFT, cuSPARSELt and the smaller CUDA wheels",
         owns=("nvidia-cu*", "nvidia-nvjitlink", "nvidia-nvjitlink-*", "nvidia-nvtx", "nvidia-nvtx-*")),
    Tier("nvidia-cublas", "cuBLAS (nvidia-cublas)", owns=("nvidia-cublas", "nvidia-cublas-*")),
    Tier("nvidia-solvers", "cuSOLVER and cuSPARSE (nvidia-cusolver, nvidia-cusparse)",
         owns=("nvidia-cusolver", "nvidia-cusolver-*", "nvidia-cusparse", "nvidia-cusparse-*")),
    Tier("nvidia-cudnn", "cuDNN (nvidia-cudnn-*)", owns=("nvidia-cudnn", "nvidia-cudnn-*")),
    Tier("nvidia-nccl", "NCCL and NVSHMEM (nvidia-nccl-*, nvidia-nvshmem-*)",
         owns=("nvidia-nccl", "nvidia-nccl-*", "nvidia-nvshmem", "nvidia-nvshmem-*")),
)


def runtime_tiers(variant: ResolvedVariant, torch_pins: Sequence[str], te_requirements: Sequence[str],
                  matrix_packages: Sequence[str]) -> list[Tier]:
    """The tiers of one runtime image, in layer order; empty ones left out."""
    v = variant.versions
    tiers: list[Tier] = []
    if v.cuda != "cpu":
        tiers += NVIDIA_TIERS
    torch = [r for r in torch_pins if r.startswith("torch==")]
    family = [r for r in torch_pins if not r.startswith("torch==")]
    tiers.append(Tier("torch", "torch with triton and the packages they need", owns=("torch", "triton",
                                                                                      "pytorch-triton"),
                      requires=tuple(torch)))
    if family:
        names = ", ".join(r.split("==")[0] for r in family)
        tiers.append(Tier("torch-family", f"the rest of the torch family ({names})",
                          owns=("torchvision", "torchaudio"), requires=tuple(family)))
    if te_requirements:
        tiers.append(Tier("transformer-engine", "transformer_engine (its wheels, the torch extension built here)",
                          owns=("transformer-engine", "transformer-engine-*"), requires=tuple(te_requirements),
                          te_wheels=True))
    tiers += matrix_tiers(matrix_packages)
    return tiers


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def matrix_tiers(packages: Sequence[str]) -> list[Tier]:
    """The matrix's own packages (pip_packages), one layer each, in the order of their names: what changes most, on
    top. One layer per package, not one for all of them: adding, removing or bumping one package replaces that
    package's layer (and what only it needs) and no other, so a node that had the image pulls that much alone (one
    shared layer made a one-package change re-send numpy with it: 5.1% of the CPU runtime). A dependency two of them
    share sits in the lowest of their layers (tiering.assign). Tier names are `matrix-<canonical name>` (a stage name
    and a file name: lowercase letters, digits and `-`)."""
    named: dict[str, list[str]] = {}
    for requirement in packages:
        m = _NAME.match(requirement)
        key = canonical_name(m.group(1)) if m else "other"
        named.setdefault(key, []).append(requirement)  # one package named twice: one layer, both requirements
    return [Tier(f"{MATRIX_PREFIX}{key}", f"the matrix's package {', '.join(reqs)} and what only it needs",
                 requires=tuple(reqs)) for key, reqs in sorted(named.items())]


def env_tiers(tiers: Sequence[Tier]) -> list[Tier]:
    """The tiers in the runtime's env stage: every tier below the matrix's own packages (nvidia, torch, its family,
    transformer_engine); the matrix's tiers are the final stage's."""
    return [t for t in tiers if not t.name.startswith(MATRIX_PREFIX)]


def spec_file(tiers: Sequence[Tier]) -> bytes:
    """The resolve stage's spec (sorted keys: the same tiers give the same bytes, the same cache key)."""
    return (json.dumps({"tiers": [t.spec() for t in tiers]}, indent=1, sort_keys=True) + "\n").encode()


@functools.lru_cache(maxsize=1)
def script_file() -> bytes:
    """imagebuild.render.tiering's own source: the script the resolve stage runs."""
    return (Path(__file__).resolve().parent / "tiering.py").read_bytes()
