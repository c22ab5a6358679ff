"""Kernel coverage of a wheel, a folder of libraries or one shared object, before it goes into an image: which target
GPUs run its CUDA code natively, which only through PTX JIT, which not at all (`imagebuild coverage`).

The reading and the rules are the probe's own (smoke/probe/fatbin.py, smoke/probe/coverage.py: standard library
only), so a wheelhouse checked here and an image checked by the smoke suite are judged by the same code. A wheel's
shared objects are extracted one at a time to a temporary file (only the headers are read, but a zip member must be
inflated to be seeked), so a 1 GB libtorch_cuda.so needs its size in free space once, not the wheel's.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.errors import UsageError
from imagebuild.smoke.probe import coverage as rules
from imagebuild.smoke.probe.fatbin import FatbinError, read_fatbin, sort_archs

_SM = re.compile(r"^(?:sm_?)?(\d{2,3})([af]?)$")
GPUS_YAML = Path(__file__).resolve().parents[1] / "compat" / "data" / "gpus.yaml"


@dataclass
class Coverage:
    """What `imagebuild coverage` found: {name: reading} of each CUDA ELF, the unreadable ones, the verdicts."""

    path: str
    targets: list[str]
    libraries: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    scanned: int = 0

    @property
    def verdicts(self) -> dict[str, Any]:
        """Per target GPU; none where no CUDA library was found (nothing to run is not "runs natively")."""
        if not self.libraries:
            return {}
        verdicts: dict[str, Any] = rules.judge(self.libraries, self.targets)
        return verdicts

    @property
    def failures(self) -> list[str]:
        lines: list[str] = rules.failures(self.libraries, self.verdicts)
        lines += [f"{name}: GPU code unreadable: {why}" for name, why in sorted(self.errors.items())]
        if not self.libraries and not self.errors:
            lines.append(f"{self.path}: no CUDA code (no .nv_fatbin in any of {self.scanned} shared objects)")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "targets": self.targets, "scanned": self.scanned,
                "libraries": self.libraries, "errors": self.errors, "gpus": self.verdicts,
                "summary": rules.summary(self.verdicts), "failures": self.failures, "ok": not self.failures}


def gpu_names() -> dict[str, str]:
    """{GPU name or alias: sm_XY} from the compatibility data's GPU table, when it has one ({} otherwise)."""
    if not GPUS_YAML.exists():
        return {}
    import yaml

    data = yaml.safe_load(GPUS_YAML.read_text()) or {}
    out: dict[str, str] = {}
    for name, row in (data.get("gpus") or {}).items():
        cc = str((row or {}).get("cc", ""))
        if "." in cc:
            sm = "sm_" + cc.replace(".", "")
            for alias in [name, *((row or {}).get("names") or [])]:
                out[str(alias).lower()] = sm
    return out


def target_arch(text: str) -> str:
    """`sm_90`, `90`, `9.0` or a GPU name the data knows (`h100`) -> sm_XY (a GPU's arch: `sm_90a` is an sm_90
    GPU); UsageError otherwise."""
    t = text.strip().lower()
    m = _SM.match(t.replace(".", "") if re.fullmatch(r"\d+\.\d", t) else t)
    if m:
        return f"sm_{m.group(1)}"
    names = gpu_names()
    if t in names:
        return names[t]
    known = f"; GPU names: {', '.join(sorted(names))}" if names else ""
    raise UsageError(f"--gpu {text!r}: want sm_XY (sm_90, sm_100, sm_90a){known}")


def _is_shared_object(name: str) -> bool:
    return bool(rules.SO_NAME.search(os.path.basename(name)))


def scan_wheel(path: Path, cov: Coverage) -> None:
    """Each shared object of the wheel (a zip) read through a temporary file, named by its path in the wheel."""
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path}: not a readable wheel (zip): {exc}") from None
    with zf, tempfile.TemporaryDirectory(prefix="ibcoverage-") as tmp:
        for info in zf.infolist():
            if info.is_dir() or not _is_shared_object(info.filename):
                continue
            cov.scanned += 1
            target = Path(tmp) / "member.so"
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            _read_one(str(target), info.filename, cov)
            target.unlink()


def _read_one(real: str, name: str, cov: Coverage) -> None:
    try:
        reading = read_fatbin(real)
    except (OSError, FatbinError) as exc:
        cov.errors[name] = f"{type(exc).__name__}: {exc}"
        return
    if reading is not None:
        cov.libraries[name] = reading


def coverage(path: str | Path, targets: list[str]) -> Coverage:
    """The coverage of a wheel (`*.whl`), a folder (every shared object under it, wheels inside it too) or one file."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file or folder")
    if not targets:
        raise UsageError("no target GPU: give at least one --gpu (sm_90, sm_100, ...)")
    cov = Coverage(str(path), list(dict.fromkeys(target_arch(t) for t in targets)))
    if p.is_file() and p.suffix == ".whl":
        scan_wheel(p, cov)
    elif p.is_file():
        cov.scanned = 1
        _read_one(str(p), str(p), cov)
    else:
        for top, dirs, files in os.walk(p):
            dirs.sort()
            for name in sorted(files):
                full = Path(top) / name
                if name.endswith(".whl"):
                    sub = Coverage(str(full), cov.targets)
                    scan_wheel(full, sub)
                    cov.scanned += sub.scanned
                    cov.libraries.update({f"{full.relative_to(p)}!{k}": v for k, v in sub.libraries.items()})
                    cov.errors.update({f"{full.relative_to(p)}!{k}": v for k, v in sub.errors.items()})
                elif _is_shared_object(name) and full.is_file() and not full.is_symlink():
                    cov.scanned += 1
                    _read_one(str(full), str(full.relative_to(p)), cov)
    return cov


def format_text(cov: Coverage) -> str:
    """A table: one row per CUDA library (its SASS and PTX), then one line per target GPU and the failures."""
    rows = [("LIBRARY", "SASS", "PTX")] + [
        (name, " ".join(r["sass"]) or "-", " ".join(r["ptx"]) or "-") for name, r in sorted(cov.libraries.items())]
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}".rstrip() for r in rows]
    lines.append("")
    for target, v in cov.verdicts.items():
        how = {rules.NATIVE: "runs natively", rules.PTX_JIT: "runs only through PTX JIT",
               rules.NO_CODE: "CANNOT RUN"}[v["runs"]]
        extra = f" ({len(v['ptx_only'])} libraries by PTX JIT)" if v["runs"] == rules.PTX_JIT else ""
        lines.append(f"{target}: {how}{extra}")
    all_sass = sort_archs({a for r in cov.libraries.values() for a in r["sass"]})
    lines.append(f"{len(cov.libraries)} of {cov.scanned} shared objects carry GPU code (SASS {' '.join(all_sass) or 'none'})")
    lines += [f"FAIL {line}" for line in cov.failures]
    return "\n".join(lines) + "\n"
