"""Preflight: the outside sources each planned image needs, asked once each before anything builds.

An image whose source does not answer (no DNS, connection refused, timeout) would fail minutes into its build,
after its parents were built for nothing. Each such image is named up front, one line with the source and what
would work instead; `build --keep-going` builds every other image. Any HTTP answer, even 401/403/404, counts as
reachable: the build itself reports what the server says.

Sources: the torch index of a non-default CUDA variant (runtime), NVIDIA's CUDA apt repository (CUDA 12 dev: PyPI
has no nvcc driver for 12.x), the deadsnakes PPA (a Python the Ubuntu release lacks, base), a registry base image
(base) and the bootstrap mirror (base). PyPI is not probed: every image needs it and pip names it when it fails.
"""

from __future__ import annotations

import concurrent.futures
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.models import ImagePlan
from imagebuild.oci import DOCKER_HUB, Reference, ReferenceSyntaxError
from imagebuild.oci.registry import HUB_API_HOST
from imagebuild.render import data
from imagebuild.secrets import redact, strip_credentials

PROBE_TIMEOUT = 8.0


@dataclass(frozen=True)
class Source:
    what: str  # "the PyTorch index", "NVIDIA's CUDA apt repository", ...
    url: str  # probed URL (credentials stripped)
    alternatives: str


def needed_sources(image: ImagePlan, present: Callable[[str], bool] | None = None) -> list[Source]:
    """The outside sources (besides PyPI) building `image` itself reaches. `present(ref)`: the engine already has
    that base image, so its registry is not needed."""
    v = image.variant
    out: list[Source] = []
    if image.flavor == "base":
        out += _base_sources(image, present)
    elif image.flavor == "runtime" and v.torch_index_url and not _wheelhouse_holds_index_wheels(image):
        out.append(Source(
            "the PyTorch index", v.torch_index_url,
            "a torch/CUDA pair whose wheels are PyPI's default (`imagebuild plan` shows them), a reachable mirror "
            "(--torch-index-url URL or torch_index_url: in the matrix), or --wheelhouse DIR holding the wheels"))
    elif image.flavor == "dev" and v.versions.cuda != "cpu" and _cuda_major(v.versions.cuda) < \
            data.CUDA_PIP_TOOLCHAIN_MIN_MAJOR:
        distro = v.os.family + v.os.version.replace(".", "")
        out.append(Source(
            "NVIDIA's CUDA apt repository (nvcc for a CUDA 12 dev image)",
            data.CUDA_REPO_URL.format(distro=distro, arch=data.cuda_repo_arch(v.platform)),
            "a CUDA 13 variant (its dev image gets nvcc from PyPI), a dev-less variant (flavors: [base, runtime]), "
            "or a host that reaches NVIDIA's repository (or an internal mirror of it)"))
    return out


_FROM_TORCH_INDEX = ("torch", "torchvision", "torchaudio")  # what render asks the torch index for


def _wheelhouse_holds_index_wheels(image: ImagePlan) -> bool:
    """The image's --wheelhouse holds a wheel for each torch-index requirement it installs (torch, and torchvision /
    torchaudio when planned) for its Python: pip finds them there (--find-links), the index is not needed."""
    # packaging here, not at import: only an image about to be built is asked about (never on a no-op)
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    folder = image.context_dirs.get("wheelhouse")
    if folder is None or not Path(folder).is_dir():
        return False
    py = "cp" + image.variant.versions.python.replace(".", "")
    wheels = []
    for path in Path(folder).glob("*.whl"):
        try:
            name, version, _build, tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if any(t.interpreter in (py, "py3") for t in tags):
            wheels.append((canonicalize_name(name), version))
    for text in image.pip_requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return False
        if canonicalize_name(req.name) in _FROM_TORCH_INDEX and not any(
                name == canonicalize_name(req.name) and req.specifier.contains(version, prereleases=True)
                for name, version in wheels):
            return False
    return True


def _base_sources(image: ImagePlan, present: Callable[[str], bool] | None) -> list[Source]:
    v = image.variant
    out: list[Source] = []
    if v.base.kind == "registry" and v.base.ref:
        if present is not None and present(v.base.ref):
            return out
        out.append(Source(f"the registry of base image {v.base.ref}", _registry_url(v.base.ref),
                          "base_image: bootstrap (a root filesystem from a Debian/Ubuntu mirror, no registry)"))
    else:
        mirror = v.base.mirror or v.os.mirror
        out.append(Source(f"the {v.os.family} mirror", f"{mirror.rstrip('/')}/dists/{v.os.codename}/InRelease",
                          "mirror: <a reachable mirror of the same suite> in the matrix"))
    if v.os.family == "ubuntu" and v.versions.python != v.os.system_python:
        out.append(Source(f"the deadsnakes PPA (Python {v.versions.python} on {v.os.id})", data.DEADSNAKES_URL,
                          f"python: \"{v.os.system_python}\" ({v.os.id}'s own Python)"))
    return out


def _cuda_major(cuda: str) -> int:
    try:
        return int(cuda.split(".")[0])
    except ValueError:
        return 0


def _registry_url(ref: str) -> str:
    try:
        host = Reference.parse(ref).registry
    except ReferenceSyntaxError:
        return ref
    return f"https://{HUB_API_HOST if host == DOCKER_HUB else host}/v2/"


def probe(url: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when `url`'s server answers (any HTTP status); else why not, in a few words."""
    clean = strip_credentials(url)
    req = urllib.request.Request(clean, method="HEAD")
    try:
        with urllib.request.urlopen(req, timeout=timeout):  # noqa: S310 (the user's configured sources)
            return None
    except urllib.error.HTTPError:
        return None  # the server answered
    except urllib.error.URLError as exc:
        reason = exc.reason
        return f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason
    except (TimeoutError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


def unreachable(images: Iterable[ImagePlan], prober: Callable[[str], str | None] | None = None,
                present: Callable[[str], bool] | None = None) -> dict[str, list[str]]:
    """image tag -> one line per unreachable source it needs (each distinct URL probed once, in parallel)."""
    wanted = {img.tag: needed_sources(img, present) for img in images}
    urls = sorted({s.url for sources in wanted.values() for s in sources})
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        answers = dict(zip(urls, pool.map(prober or probe, urls), strict=True))
    out: dict[str, list[str]] = {}
    for tag, sources in wanted.items():
        lines = [f"{tag}: needs {s.what} ({redact(s.url)}), which does not answer ({answers[s.url]}); "
                 f"instead: {s.alternatives}" for s in sources if answers[s.url]]
        if lines:
            out[tag] = lines
    return out


def blocked_tags(images: list[ImagePlan], problems: dict[str, list[str]]) -> set[str]:
    """The tags that cannot build: those with an unreachable source and every descendant of them."""
    blocked = set(problems)
    for img in images:  # parents come first
        if img.parent in blocked:
            blocked.add(img.tag)
    return blocked

