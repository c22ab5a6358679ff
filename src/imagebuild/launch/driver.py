"""Will this node's NVIDIA driver run the image? Checked before `run` starts a container and before `slurm` prints a
job: the image's floor is ITS label `io.imagebuild.min-driver` (render/hardware.py; read from the inspect answer of the
image ID about to start, never from a matrix), the node's driver is what /proc/driver/nvidia/version says, else
`nvidia-smi --query-gpu=driver_version --format=csv,noheader`.

Outcomes, never "ok" for what was not compared:
- ok           the driver is at least the floor (one line naming both);
- compat       older than the floor, but the image ships a forward-compatibility package whose floor it meets
               (data-center GPUs only: said, not refused);
- refused      older: DriverTooOld (one `error:` line naming both versions and --ignore-driver), or with
               --ignore-driver a warning and the image starts;
- not checked  a CUDA image (or one without imagebuild's labels) on a host without a readable driver, or an image
               whose floor cannot be read: said as "not checked";
- silent       a CPU image (io.imagebuild.cuda=cpu): nothing to check, nothing said.
Under a recorded host tree (IMAGEBUILD_HOST_ROOT / slurm --host-root) the files are read under it, and nvidia-smi's
answer is the recorded `<root>/nvidia-smi/driver-version.csv` when present.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import UsageError
from imagebuild.render.hardware import FORWARD_COMPAT_DRIVER_LABEL, FORWARD_COMPAT_LABEL, MIN_DRIVER_LABEL

CUDA_LABEL = "io.imagebuild.cuda"
PROC_VERSION = Path("proc/driver/nvidia/version")
SMI_ARGS = ["--query-gpu=driver_version", "--format=csv,noheader"]
SMI_RECORDED = Path("nvidia-smi/driver-version.csv")
ROOT_ENV = "IMAGEBUILD_HOST_ROOT"
_VERSION = re.compile(r"^\d{2,4}\.\d{1,3}(?:\.\d{1,3})?$")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 ..." and the open modules'
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.82.07  Release Build  (...)  ..."
_PROC = re.compile(r"^NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d{2,4}\.\d{1,3}(?:\.\d{1,3})?)(?:\s|$)",
                   re.MULTILINE)


class DriverTooOld(UsageError):
    """The node's driver is older than the image's floor (exit 2: nothing was started)."""


@dataclass(frozen=True)
class HostDriver:
    version: str | None  # "535.129.03"; None: no driver could be read
    source: str  # where it was read ("/proc/driver/nvidia/version", "nvidia-smi"), or why none was


@dataclass(frozen=True)
class Verdict:
    status: str  # "ok" | "compat" | "refused" | "not checked" | "silent"
    message: str


def _num(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in version.split("."))


def parse_proc_version(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version's `NVRM version:` line, or None."""
    match = _PROC.search(text)
    return match.group(1) if match else None


def parse_smi(text: str) -> str | None:
    """`nvidia-smi --query-gpu=driver_version --format=csv,noheader`: one line per GPU ("535.129.03"); the oldest
    when they differ; None for anything else ("No devices were found", a driver/library mismatch message)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not all(_VERSION.match(line) for line in lines):
        return None
    return min(lines, key=_num)


def _run_smi(timeout: float = 20.0) -> tuple[str | None, str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None, "nvidia-smi not found"
    try:
        done = subprocess.run([exe, *SMI_ARGS], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed ({type(exc).__name__})"
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        return None, f"nvidia-smi exited {done.returncode}" + (f": {said[0][:120]}" if said else "")
    return parse_smi(done.stdout), "nvidia-smi"


def read_host_driver(root: Path = Path("/"), smi: Callable[[], tuple[str | None, str]] = _run_smi) -> HostDriver:
    """The driver of the host under `root`: /proc first, then nvidia-smi (live root) or its recording."""
    proc = root / PROC_VERSION
    why = [f"no {'/' / PROC_VERSION}"]
    if proc.is_file():
        try:
            version = parse_proc_version(proc.read_text(errors="replace")[:4096])
        except OSError as exc:
            version, why[0] = None, f"{'/' / PROC_VERSION}: {exc.strerror or exc}"
        if version:
            return HostDriver(version, str("/" / PROC_VERSION))
        why[0] = f"{'/' / PROC_VERSION} names no driver version"
    if root != Path("/"):
        recorded = root / SMI_RECORDED
        if recorded.is_file():
            version = parse_smi(recorded.read_text(errors="replace")[:4096])
            if version:
                return HostDriver(version, f"nvidia-smi (recorded: {recorded})")
            why.append(f"{recorded} names no driver version")
        return HostDriver(None, ", ".join(why))
    version, source = smi()
    if version:
        return HostDriver(version, source)
    why.append(source if source != "nvidia-smi" else "nvidia-smi names no driver version")
    return HostDriver(None, ", ".join(why))


def judge(labels: Mapping[str, str], image: str, host: HostDriver) -> Verdict:
    """What the host's driver means for the image of these labels (see the module's outcomes)."""
    cuda = labels.get(CUDA_LABEL) or ""
    floor = (labels.get(MIN_DRIVER_LABEL) or "").strip()
    if cuda == "cpu":
        return Verdict("silent", "")
    if not floor:
        what = f"CUDA {cuda} image" if cuda else "image (no io.imagebuild.cuda label)"
        return Verdict("not checked", f"driver: not checked: the {what} {image} carries no {MIN_DRIVER_LABEL} label"
                       + (f"; this host's driver is {host.version} ({host.source})" if host.version else ""))
    if not _VERSION.match(floor):
        return Verdict("not checked", f"driver: not checked: {image}'s {MIN_DRIVER_LABEL} label {floor[:40]!r} is not "
                       "a driver version")
    if host.version is None:
        return Verdict("not checked", f"driver: not checked: {image} needs NVIDIA driver >= {floor}, and no driver "
                       f"was found on this host ({host.source})")
    if _num(host.version) >= _num(floor):
        return Verdict("ok", f"driver: {host.version} ({host.source}) runs {image} (it needs >= {floor})")
    compat_floor = (labels.get(FORWARD_COMPAT_DRIVER_LABEL) or "").strip()
    if compat_floor and _VERSION.match(compat_floor) and _num(host.version) >= _num(compat_floor):
        return Verdict("compat", f"driver: {host.version} ({host.source}) is older than {floor}, which {image} "
                       f"needs; it runs only through its forward-compatibility package "
                       f"({labels.get(FORWARD_COMPAT_LABEL) or 'cuda-compat'}, from driver {compat_floor}), "
                       "which NVIDIA supports on data-center GPUs only")
    return Verdict("refused", f"{image} needs NVIDIA driver >= {floor} (its {MIN_DRIVER_LABEL} label"
                   + (f", CUDA {cuda}" if cuda else "") + f"); this host's driver is {host.version} ({host.source}), "
                   "so its CUDA calls would fail; use a node with a newer driver or an image of an older CUDA, or "
                   "--ignore-driver to start it anyway")


def enforce(labels: Mapping[str, str], image: str, host: HostDriver, ignore: bool,
            echo: Callable[[str], None]) -> Verdict:
    """Say the verdict; DriverTooOld for a refusal unless `ignore` (then a warning)."""
    verdict = judge(labels, image, host)
    if verdict.status == "refused":
        if not ignore:
            raise DriverTooOld(verdict.message)
        echo(f"warning: {verdict.message} (--ignore-driver: starting it anyway)")
    elif verdict.message:
        echo(verdict.message if verdict.status == "ok" else f"note: {verdict.message}")
    return verdict


def check_run(labels: Mapping[str, str], image: str, ignore: bool, echo: Callable[[str], None]) -> Verdict:
    """`imagebuild run`'s check: this host (or $IMAGEBUILD_HOST_ROOT's recorded one)."""
    from imagebuild.host import host_root

    root = host_root(Path(os.environ.get(ROOT_ENV) or "/"), f"${ROOT_ENV}")
    return enforce(labels, image, read_host_driver(root), ignore, echo)


def _engine_labels(key: str) -> dict[str, str] | None:
    """The labels of image `key` (an ID or a reference) in the local engine; None when there is no engine or it
    does not hold the image (slurm needs none)."""
    try:
        from imagebuild.engine import connect
        from imagebuild.engine.store import as_store

        info: Any = as_store(connect("inspect", timeout=10, lazy=True)).inspect(key)
    except Exception:  # noqa: BLE001 - no engine, no socket, no permission: the floor is then "not checked"
        return None
    if not isinstance(info, dict):
        return None
    return dict((info.get("Config") or {}).get("Labels") or {})


def check_slurm(image: str, image_id: str | None, root: Path, ignore: bool, echo: Callable[[str], None],
                labels_of: Callable[[str], dict[str, str] | None] = _engine_labels) -> Verdict:
    """`imagebuild slurm`'s check against the node model under `root` (--host-root): the floor from the labels of
    the image ID the job starts (a --matrix row's record) or, for a reference, the engine's image of it."""
    is_file = image.startswith(("/", "./", "../")) or image.endswith(".sqsh")  # pyxis reads it as a squashfs
    key = image_id or (None if is_file else image)
    labels = labels_of(key) if key else None
    host = read_host_driver(root)
    if labels is None:
        verdict = Verdict("not checked", f"driver: not checked: {image}'s {MIN_DRIVER_LABEL} label is not readable "
                          "here (give --matrix with the image built or exported on this host, or load it into the "
                          "engine)" + (f"; the node's driver is {host.version} ({host.source})" if host.version else ""))
        echo(f"note: {verdict.message}")
        return verdict
    if root == Path("/") and host.version is None:
        host = HostDriver(None, host.source + "; the compute nodes' driver may differ: --host-root a node's tree")
    return enforce(labels, image, host, ignore, echo)
