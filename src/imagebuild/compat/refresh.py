"""Refresh torch.yaml from the torch wheels' own metadata, without downloading a wheel.

`pip install --dry-run --report` resolves `torch==X` for a target platform and, through PEP 658, fetches only the
wheel's METADATA file. Its Requires-Dist lines are the authoritative pins:
    nvidia-cudnn-cu12==9.10.2.21 / nvidia-cudnn-cu13==...   nvidia-nccl-cu1X==...   triton==3.5.1 (or ~=3.8.0)
    nvidia-cuda-runtime-cu12==12.8.90 (CUDA 12.x) / cuda-toolkit[...]==13.0.2 (CUDA 13.x) -> the CUDA variant
Requires-Python and the `Programming Language :: Python :: 3.N` classifiers give the Python range.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imagebuild.compat.tables import Tables, cuda_tag, vtuple
from imagebuild.errors import ImagebuildError

_REQ = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*(==|~=|>=)\s*([0-9][0-9A-Za-z.+]*)")
_CUDA_FROM = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime", "cuda-toolkit")
_CLASSIFIER = re.compile(r"Programming Language :: Python :: (3\.\d+)$")
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_|manylinux2014_|manylinux1_")


@dataclass(frozen=True)
class WheelPins:
    torch: str  # public version, local label dropped ("2.9.1+cu130" -> "2.9.1")
    cuda: str  # "12.8" | "13.0" | "cpu"
    cudnn: str | None
    nccl: str | None
    triton: str | None
    python: tuple[str, str] | None
    glibc: str | None
    wheel: str  # file name, for the diff's provenance


def parse_report(report: dict[str, Any]) -> WheelPins:
    """The pins of the torch wheel in a `pip install --report` JSON document."""
    items = [i for i in report.get("install", []) if i.get("metadata", {}).get("name", "").lower() == "torch"]
    if not items:
        raise ImagebuildError("pip's report holds no torch wheel")
    item = items[0]
    meta = item["metadata"]
    reqs: dict[str, str] = {}
    for line in meta.get("requires_dist") or []:
        spec, _, marker = line.partition(";")
        if "extra ==" in marker:
            continue
        m = _REQ.match(spec)
        if m:
            reqs[m.group(1).lower().replace("_", "-")] = m.group(3)
    cudnn = next((v for k, v in reqs.items() if k.startswith("nvidia-cudnn-cu")), None)
    nccl = next((v for k, v in reqs.items() if k.startswith("nvidia-nccl-cu")), None)
    cuda_full = next((reqs[k] for k in _CUDA_FROM if k in reqs), None)
    local = meta["version"].partition("+")[2]
    if cuda_full:
        cuda = ".".join(cuda_full.split(".")[:2])
    elif local.startswith("cu") and local[2:].isdigit():
        cuda = f"{local[2:-1]}.{local[-1]}"
    else:
        cuda = "cpu"
    pythons = sorted({m.group(1) for c in meta.get("classifier") or [] if (m := _CLASSIFIER.search(c))},
                     key=vtuple)
    url = (item.get("download_info") or {}).get("url", "")
    wheel = url.rsplit("/", 1)[-1]
    glibc = None
    if m := _MANYLINUX.search(wheel):
        glibc = f"{m.group(1)}.{m.group(2)}" if m.group(1) else ("2.17" if "2014" in m.group(0) else "2.5")
    return WheelPins(
        torch=meta["version"].partition("+")[0],
        cuda=cuda,
        cudnn=cudnn,
        nccl=nccl,
        triton=reqs.get("triton"),
        python=(pythons[0], pythons[-1]) if pythons else None,
        glibc=glibc,
        wheel=wheel,
    )


def pip_report(torch: str, *, python: str = "3.12", platform: str = "manylinux_2_28_x86_64",
               index_url: str | None = None,
               runner: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> dict[str, Any]:
    """Run pip's dry-run resolver for torch==X; returns the report (only the METADATA file is fetched)."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-refresh-") as tmp:
        report = Path(tmp) / "report.json"
        target = Path(tmp) / "target"
        target.mkdir()
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet",
               "--report", str(report), f"torch=={torch}", "--only-binary=:all:", "--python-version", python,
               "--platform", platform, "--target", str(target)]
        if index_url:
            cmd += ["--index-url", index_url]
        proc = runner(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not report.is_file():
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
            raise ImagebuildError(f"pip could not resolve torch=={torch}: {' / '.join(tail) or 'no output'}")
        loaded: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
        return loaded


def diff(tables: Tables, pins: WheelPins, default: bool) -> list[str]:
    """Human-readable differences between torch.yaml and the wheel (empty when they agree)."""
    where = f"{pins.torch} {cuda_tag(pins.cuda)}"
    release = tables.torch.get(pins.torch)
    if release is None:
        return [f"{where}: new release (cudnn {pins.cudnn}, nccl {pins.nccl}, triton {pins.triton}, "
                f"python {'–'.join(pins.python or ('?', '?'))})"]
    out = []
    if default and release.pypi_default != pins.cuda:
        out.append(f"{pins.torch}: pypi_default {release.pypi_default} → {pins.cuda}")
    if pins.python and release.python != pins.python:
        out.append(f"{pins.torch}: python {'–'.join(release.python)} → {'–'.join(pins.python)}")
    variant = release.variants.get(pins.cuda)
    if variant is None:
        return out + [f"{where}: new variant (cudnn {pins.cudnn}, nccl {pins.nccl}, triton {pins.triton})"]
    for name in ("cudnn", "nccl", "triton"):
        old, new = getattr(variant, name), getattr(pins, name)
        if old != new:
            out.append(f"{where}: {name} {old} → {new}")
    if not variant.confirmed and not out:
        out.append(f"{where}: confirmed (pins match the wheel)")
    return out


def _q(value: str | None) -> str:
    return "null" if value is None else json.dumps(value)


def _variant_line(pins: WheelPins, old: dict[str, Any] | None) -> str:
    fields = {"cudnn": pins.cudnn, "nccl": pins.nccl, "triton": pins.triton} if pins.cuda != "cpu" else {}
    parts = [f"{k}: {_q(v)}" for k, v in fields.items()]
    if old and old.get("archs"):
        parts.append(f"archs: [{', '.join(old['archs'])}]")
    parts.append("confirmed: true")
    key = "cpu" if pins.cuda == "cpu" else json.dumps(pins.cuda)
    return f"      {key}: {{{', '.join(parts)}}}"


def update_text(text: str, pins: WheelPins, default: bool) -> str:
    """torch.yaml text with `pins` applied, comments kept (the file's layout rule makes this a line edit)."""
    data = yaml.safe_load(text)
    lines = text.splitlines()
    head = f'  "{pins.torch}":'
    if head not in lines:
        block = [head, '    released: ""', f"    python: [{_q(pins.python[0])}, {_q(pins.python[1])}]"
                 if pins.python else '    python: ["3.10", "3.14"]',
                 f"    glibc: {_q(pins.glibc or '2.28')}", f"    pypi_default: {_q(pins.cuda)}",
                 "    torchvision: null  # fill in", "    torchaudio: null  # fill in", "    variants:",
                 _variant_line(pins, None)]
        return "\n".join(lines + block) + "\n"
    start = lines.index(head)
    end = next((i for i in range(start + 1, len(lines)) if re.match(r'^  ["\w]', lines[i])), len(lines))
    while end > start + 1 and lines[end - 1].lstrip().startswith("#"):  # comments above the next release
        end -= 1
    old = data["releases"][pins.torch]["variants"].get(pins.cuda if pins.cuda != "cpu" else "cpu")
    key_re = re.compile(rf'^      "?{re.escape(pins.cuda)}"?:')
    for i in range(start, end):
        line = lines[i]
        if key_re.match(line):
            lines[i] = _variant_line(pins, old)
        elif default and line.startswith("    pypi_default:"):
            lines[i] = f"    pypi_default: {_q(pins.cuda)}"
        elif pins.python and line.startswith("    python:"):
            lines[i] = f"    python: [{_q(pins.python[0])}, {_q(pins.python[1])}]"
    if old is None:
        at = next(i for i in range(start, end) if lines[i].strip() == "variants:")
        lines.insert(at + 1, _variant_line(pins, None))
    return "\n".join(lines) + "\n"
