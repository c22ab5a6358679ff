"""Typed views of the compatibility data in compat/data/*.yaml, loaded once per process.

No decisions here: resolve/ decides what a combination means. The YAML is read through importlib.resources so the
same code works from a source checkout and an installed wheel.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from imagebuild.models import DEFAULT_PLATFORM, OSInfo

_NUM = re.compile(r"\d+")


def vtuple(version: str) -> tuple[int, ...]:
    """'9.10.2.21' -> (9, 10, 2, 21): numeric comparison, so 9.10 sorts after 9.9."""
    return tuple(int(n) for n in _NUM.findall(version))


def arch_num(arch: str) -> int:
    """'sm_90' -> 90, 'sm_100a' -> 100 (compute capability as an integer)."""
    digits = _NUM.search(arch)
    return int(digits.group()) if digits else 0


@dataclass(frozen=True)
class TorchVariant:
    cuda: str  # "12.8" | "cpu"
    cudnn: str | None
    nccl: str | None
    triton: str | None
    archs: tuple[str, ...]
    confirmed: bool


@dataclass(frozen=True)
class PlatformInfo:
    """One row of compat/data/platforms.yaml."""

    name: str  # "linux/arm64"
    deb_arch: str  # "arm64"
    uname: str  # "aarch64"
    wheel_tag: str  # "aarch64"
    ports_mirror: bool  # Ubuntu serves it from ports.ubuntu.com/ubuntu-ports
    gpu_arch_min: str | None  # "sm_90": no data-centre GPU of this CPU architecture below it
    compile_native_only: bool  # a CUDA extension (transformer_engine) is not compiled under emulation
    confirmed: bool


@dataclass(frozen=True)
class PlatformWheels:
    """A torch release's wheels for a platform other than the default (torch.yaml `arm64:`)."""

    pypi: str  # what PyPI's wheel for the platform is: a CUDA version or "cpu"
    index: tuple[str, ...]  # the variants the PyTorch index serves for it
    archs: dict[str, tuple[str, ...]]  # CUDA -> arch list where it differs from the default platform's
    confirmed: bool


@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, str]  # oldest, newest
    glibc: str
    pypi_default: str
    torchvision: str | None
    torchaudio: str | None
    variants: dict[str, TorchVariant]
    confirmed: bool = True
    # platform ("linux/arm64") -> its wheels; the default platform's are `pypi_default` + `variants`
    platform_wheels: dict[str, PlatformWheels] = field(default_factory=dict)

    def pythons(self) -> list[str]:
        lo, hi = (vtuple(v)[1] for v in self.python)
        return [f"3.{m}" for m in range(lo, hi + 1)]


@dataclass(frozen=True)
class CudaInfo:
    version: str
    tag: str  # "cu128"
    min_driver: str
    archs: tuple[str, ...]
    cudart_dir: str
    confirmed: bool

    @property
    def major(self) -> int:
        return vtuple(self.version)[0]


@dataclass(frozen=True)
class TERelease:
    version: str
    torch_min: str
    cuda_min: str
    cudnn_min: str
    min_arch: str
    fp8_min_arch: str
    cuda_majors: tuple[int, ...]
    cudart_dirs: tuple[str, ...] | None
    confirmed: bool
    note: str = ""
    broken: str = ""  # why imagebuild cannot use it (resolution rejects the release)


@dataclass(frozen=True)
class Tables:
    torch: dict[str, TorchRelease]
    cuda: dict[str, CudaInfo]
    os: dict[str, OSInfo]
    os_images: dict[str, str]  # os id -> official image reference (default base)
    te: dict[str, TERelease]
    index_base: str
    confirmed: dict[str, bool] = field(default_factory=dict)  # "os:<id>" -> confirmed flag of that row
    platforms: dict[str, PlatformInfo] = field(default_factory=dict)  # "linux/arm64" -> its facts
    default_platform: str = DEFAULT_PLATFORM

    @property
    def platform_names(self) -> list[str]:
        return list(self.platforms) or [self.default_platform]

    def platform(self, text: object) -> str | None:
        """`text` as a platform of these tables: `linux/arm64`, or `arm64` as docker --platform reads it (case and
        spaces aside); None when it names none of them."""
        if not isinstance(text, str):
            return None
        name = text.strip().lower()
        name = name if "/" in name else f"linux/{name}"
        return name if name in self.platform_names else None

    def machine_platform(self, machine: str | None) -> str | None:
        """The platform whose images run natively on `machine` (`uname -m`, as `docker info` says Architecture:
        `x86_64` -> linux/amd64); None when no row names it."""
        for name, info in self.platforms.items():
            if machine in (info.uname, info.deb_arch):
                return name
        return None


def cuda_tag(cuda: str) -> str:
    """The wheel index / local version label: "cu128", "cu130" or "cpu"."""
    return "cpu" if cuda == "cpu" else "cu" + cuda.replace(".", "")


def accel(cuda: str) -> str:
    """The accelerator part of variant keys, base keys and alias tags: "cuda12.8" or "cpu"."""
    return "cpu" if cuda == "cpu" else f"cuda{cuda}"


def _read(data_dir: Path | None, name: str) -> dict[str, Any]:
    if data_dir is not None:
        text = (data_dir / name).read_text(encoding="utf-8")
    else:
        text = resources.files("imagebuild.compat").joinpath("data").joinpath(name).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader) or {}


def _cuda(raw: dict[str, Any]) -> dict[str, CudaInfo]:
    return {
        str(v): CudaInfo(
            version=str(v),
            tag=cuda_tag(str(v)),
            min_driver=str(row["min_driver"]),
            archs=tuple(row["archs"]),
            cudart_dir=row["cudart_dir"],
            confirmed=bool(row.get("confirmed", False)),
        )
        for v, row in raw["cuda"].items()
    }


def _torch(raw: dict[str, Any], cuda: dict[str, CudaInfo]) -> dict[str, TorchRelease]:
    out = {}
    for version, row in raw["releases"].items():
        variants = {}
        for cv, pins in row["variants"].items():
            cv = str(cv)
            default_archs = cuda[cv].archs if cv in cuda else ()
            variants[cv] = TorchVariant(
                cuda=cv,
                cudnn=None if cv == "cpu" else pins.get("cudnn"),
                nccl=None if cv == "cpu" else pins.get("nccl"),
                triton=None if cv == "cpu" else pins.get("triton"),
                archs=tuple(pins.get("archs") or default_archs),
                confirmed=bool(pins.get("confirmed", False)),
            )
        out[str(version)] = TorchRelease(
            version=str(version),
            python=(str(row["python"][0]), str(row["python"][1])),
            glibc=str(row.get("glibc", "2.17")),
            pypi_default=str(row["pypi_default"]),
            torchvision=row.get("torchvision"),
            torchaudio=row.get("torchaudio"),
            variants=variants,
            confirmed=all(v.confirmed for v in variants.values()),
            platform_wheels=_platform_wheels(row),
        )
    return out


# torch.yaml's per-platform keys (a release block's line) -> the platform they describe
_WHEEL_KEYS = {"arm64": "linux/arm64"}


def _platform_wheels(row: dict[str, Any]) -> dict[str, PlatformWheels]:
    out = {}
    for key, platform in _WHEEL_KEYS.items():
        if (facts := row.get(key)) is not None:
            out[platform] = PlatformWheels(
                pypi=str(facts["pypi"]),
                index=tuple(str(c) for c in facts.get("index") or ()),
                archs={str(c): tuple(a) for c, a in (facts.get("archs") or {}).items()},
                confirmed=bool(facts.get("confirmed", False)),
            )
    return out


def _platforms(raw: dict[str, Any]) -> dict[str, PlatformInfo]:
    return {
        str(name): PlatformInfo(
            name=str(name),
            deb_arch=str(row["deb_arch"]),
            uname=str(row["uname"]),
            wheel_tag=str(row["wheel_tag"]),
            ports_mirror=bool(row.get("ports_mirror", False)),
            gpu_arch_min=row.get("gpu_arch_min"),
            compile_native_only=bool(row.get("compile_native_only", False)),
            confirmed=bool(row.get("confirmed", False)),
        )
        for name, row in raw["platforms"].items()
    }


def _os(raw: dict[str, Any]) -> tuple[dict[str, OSInfo], dict[str, str], dict[str, bool]]:
    infos, images, confirmed = {}, {}, {}
    for os_id, row in raw["os"].items():
        infos[os_id] = OSInfo(
            id=os_id,
            family=row["family"],
            version=str(row["version"]),
            codename=row["codename"],
            system_python=str(row["system_python"]),
            installable_pythons=tuple(str(p) for p in row.get("installable_pythons") or ()),
            mirror=row["mirror"],
            glibc=str(row["glibc"]),
            components=tuple(row.get("components") or ("main",)),
            archive_keys=tuple(str(k).replace(" ", "").upper() for k in row.get("archive_keys") or ()),
            keyring=row.get("keyring"),
            ports_mirror=row.get("ports_mirror"),
        )
        images[os_id] = row["image"]
        confirmed[f"os:{os_id}"] = bool(row.get("confirmed", False))
    return infos, images, confirmed


def _te(raw: dict[str, Any]) -> dict[str, TERelease]:
    common = raw.get("common") or {}
    out = {}
    for version, row in raw["releases"].items():
        r = {**common, **(row or {})}
        out[str(version)] = TERelease(
            version=str(version),
            torch_min=str(r["torch_min"]),
            cuda_min=str(r["cuda_min"]),
            cudnn_min=str(r["cudnn_min"]),
            min_arch=r["min_arch"],
            fp8_min_arch=r["fp8_min_arch"],
            cuda_majors=tuple(int(m) for m in r["cuda_majors"]),
            cudart_dirs=tuple(r["cudart_dirs"]) if r.get("cudart_dirs") else None,
            confirmed=bool(r.get("confirmed", False)),
            note=r.get("note", "") or "",
            broken=r.get("broken", "") or "",
        )
    return out


def load_from(data_dir: Path | None = None) -> Tables:
    """Read the five tables (from `data_dir` when given: tests and `refresh` previews use that)."""
    cuda = _cuda(_read(data_dir, "cuda.yaml"))
    torch_raw = _read(data_dir, "torch.yaml")
    infos, images, confirmed = _os(_read(data_dir, "os.yaml"))
    platforms_raw = _read(data_dir, "platforms.yaml")
    return Tables(
        torch=_torch(torch_raw, cuda),
        cuda=cuda,
        os=infos,
        os_images=images,
        te=_te(_read(data_dir, "transformer_engine.yaml")),
        index_base=torch_raw.get("index_base", "https://download.pytorch.org/whl").rstrip("/"),
        confirmed=confirmed,
        platforms=_platforms(platforms_raw),
        default_platform=str(platforms_raw.get("default", DEFAULT_PLATFORM)),
    )


@functools.lru_cache(maxsize=1)
def load() -> Tables:
    """The packaged tables, parsed once per process (resolution of 500 variants must not re-read files)."""
    return load_from(None)


def data_path(name: str) -> Path:
    """Filesystem path of a packaged data file (refresh --write edits it in place)."""
    return Path(str(resources.files("imagebuild.compat").joinpath("data").joinpath(name)))
