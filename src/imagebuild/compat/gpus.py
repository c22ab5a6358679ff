"""Typed view of compat/data/gpus.yaml: target GPUs (compute capability, host platform), which CUDA toolkits compile
for each SASS arch, the default targets of each image family, and forward-compatibility driver floors.

No decisions here (resolve/gpus.py makes them); `name_of` only normalises how a person may spell a GPU.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from imagebuild.compat.tables import arch_num, vtuple

ARCH_RE = re.compile(r"^sm_(\d{2,3})([af]?)$")
DATA_FILE = "compat/data/gpus.yaml"  # as messages name it


@dataclass(frozen=True)
class Gpu:
    name: str  # "h100"
    cc: str  # "9.0"
    platform: str  # "linux/amd64": the CPU architecture of the hosts it comes in
    confirmed: bool
    names: tuple[str, ...] = ()  # other spellings

    @property
    def arch(self) -> str:
        """'9.0' -> 'sm_90', '10.3' -> 'sm_103'."""
        major, minor = self.cc.split(".")
        return f"sm_{major}{minor}"


@dataclass(frozen=True)
class ArchRange:
    arch: str
    cuda_min: str
    cuda_max: str | None  # None: still compiled for by the newest toolkit
    confirmed: bool

    def allows(self, cuda: str) -> bool:
        v = vtuple(cuda)[:2]
        if v < vtuple(self.cuda_min)[:2]:
            return False
        return self.cuda_max is None or v <= vtuple(self.cuda_max)[:2]

    def describe(self) -> str:
        span = f"CUDA {self.cuda_min}–{self.cuda_max}" if self.cuda_max else f"CUDA >= {self.cuda_min}"
        return span + ("" if self.confirmed else " (best public knowledge, confirmed: false)")


@dataclass(frozen=True)
class Family:
    family: str  # "CUDA 12.8+ (amd64)"
    platform: str
    cuda_min: str
    gpus: tuple[str, ...]


@dataclass(frozen=True)
class GpuTables:
    gpus: dict[str, Gpu]
    archs: dict[str, ArchRange]
    defaults: tuple[Family, ...]
    forward_compat: dict[int, tuple[str, bool]]  # CUDA major -> (oldest data-center driver, confirmed)

    def lookup(self, text: str) -> Gpu | None:
        """A GPU by any spelling: `H100`, `rtx pro 6000`, `RTX_PRO_6000`, an alias in `names`."""
        key = name_of(text)
        if key in self.gpus:
            return self.gpus[key]
        for gpu in self.gpus.values():
            if key in gpu.names:
                return gpu
        return None

    def arch_range(self, arch: str) -> ArchRange | None:
        """The toolkit range of `arch` (`sm_90a` reads as sm_90's)."""
        match = ARCH_RE.match(arch)
        return self.archs.get(f"sm_{match.group(1)}") if match else None

    def family(self, cuda: str, platform: str) -> Family | None:
        """The image family of a CUDA image (None for CPU images and families the data does not name)."""
        if cuda == "cpu":
            return None
        for fam in self.defaults:
            if fam.platform == platform and vtuple(cuda)[:2] >= vtuple(fam.cuda_min)[:2]:
                return fam
        return None

    def choices(self) -> str:
        return ", ".join(self.gpus) + ", or an arch like sm_90"


def name_of(text: str) -> str:
    """How GPU names are compared: lower case, spaces and underscores as dashes ('RTX PRO 6000' -> 'rtx-pro-6000')."""
    return re.sub(r"[\s_]+", "-", text.strip().lower())


def cc_of(arch: str) -> str:
    """'sm_90' -> '9.0', 'sm_90a' -> '9.0a', 'sm_103' -> '10.3' (TORCH_CUDA_ARCH_LIST's spelling)."""
    match = ARCH_RE.match(arch)
    if not match:
        return arch
    num = arch_num(arch)
    return f"{num // 10}.{num % 10}{match.group(2)}"


def _read(data_dir: Path | None) -> dict[str, Any]:
    if data_dir is not None:
        text = (data_dir / "gpus.yaml").read_text(encoding="utf-8")
    else:
        text = resources.files("imagebuild.compat").joinpath("data").joinpath("gpus.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def load_from(data_dir: Path | None = None) -> GpuTables:
    raw = _read(data_dir)
    gpus = {
        str(name): Gpu(name=str(name), cc=str(row["cc"]), platform=str(row["platform"]),
                       confirmed=bool(row.get("confirmed", False)),
                       names=tuple(name_of(str(n)) for n in row.get("names") or ()))
        for name, row in (raw.get("gpus") or {}).items()
    }
    archs = {
        str(arch): ArchRange(arch=str(arch), cuda_min=str(row["cuda_min"]),
                             cuda_max=str(row["cuda_max"]) if row.get("cuda_max") else None,
                             confirmed=bool(row.get("confirmed", False)))
        for arch, row in (raw.get("archs") or {}).items()
    }
    defaults = tuple(
        Family(family=str(row["family"]), platform=str(row["platform"]), cuda_min=str(row["cuda_min"]),
               gpus=tuple(str(g) for g in row["gpus"]))
        for row in raw.get("defaults") or ()
    )
    compat = {int(major): (str(row["min_driver"]), bool(row.get("confirmed", False)))
              for major, row in (raw.get("forward_compat") or {}).items()}
    return GpuTables(gpus=gpus, archs=archs, defaults=defaults, forward_compat=compat)


@functools.lru_cache(maxsize=1)
def load() -> GpuTables:
    """The packaged table, parsed once per process."""
    return load_from(None)
