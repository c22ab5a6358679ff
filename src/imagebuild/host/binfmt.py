"""Can this machine run another architecture's binaries? binfmt_misc's QEMU handler, read under a root directory.

An arm64 image is built and tested on an amd64 machine through QEMU user emulation: the kernel hands every aarch64
ELF binary to the handler registered as `qemu-aarch64` in binfmt_misc. Inside a container (a RUN step, the smoke
suite, mmdebstrap's chroot) the handler's interpreter path does not exist, so the handler must carry the F flag (the
kernel opens the interpreter when it is registered). scripts/binfmt.sh registers QEMU 10 (Debian trixie's qemu-user)
that way; this module only reads (tests use recorded trees), and asks the interpreter its version.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

BINFMT_DIR = Path("proc/sys/fs/binfmt_misc")
# QEMU older than this ran import torch but crashed on torch 2.13's aarch64 CPU kernels (SIGSEGV under 7.2)
TESTED_QEMU_MAJOR = 10
_VERSION = re.compile(r"qemu-[a-z0-9_]+ version (\d+)\.(\d+)(?:\.(\d+))?")


class Handler(NamedTuple):
    """A binfmt_misc entry: enabled or not, its flags ("POF"), its interpreter's path."""

    enabled: bool
    flags: str
    interpreter: str


def handler(uname: str, root: Path = Path("/")) -> Handler | None:
    """The `qemu-UNAME` entry of binfmt_misc, read once; None when none is registered (or binfmt_misc is not
    mounted)."""
    try:
        lines = (root / BINFMT_DIR / f"qemu-{uname}").read_text().splitlines()
    except OSError:
        return None

    def field(name: str) -> str:
        return next((ln.split(name, 1)[1].strip() for ln in lines if ln.startswith(name)), "")

    return Handler("enabled" in lines, field("flags:"), field("interpreter "))


def missing_emulation(uname: str, root: Path = Path("/")) -> str | None:
    """Why binaries of `uname` (aarch64) cannot run here under emulation; None when they can (the handler is
    registered, enabled and has the F flag)."""
    if not (root / BINFMT_DIR / "register").exists():
        return f"binfmt_misc is not mounted on /{BINFMT_DIR}"
    entry = handler(uname, root)
    if entry is None:
        return f"no qemu-{uname} handler is registered in binfmt_misc"
    if not entry.enabled:
        return f"the qemu-{uname} handler in binfmt_misc is disabled"
    flags = entry.flags
    if "F" not in flags:
        return (f"the qemu-{uname} handler in binfmt_misc lacks the F flag (flags {flags or 'none'}): its interpreter "
                "is not found inside containers")
    return None


_MAX_INTERPRETER = 256 << 20  # a QEMU user binary is ~17 MB; a larger "interpreter" is not read


def emulator_version(uname: str, root: Path = Path("/")) -> str | None:
    """The version of QEMU that runs `uname` binaries here ("10.0.13"), read from the handler's interpreter file (its
    version banner, "qemu-aarch64 version 10.0.13 (...)", is a string in the binary); the interpreter is never run
    (a handler someone else registered is not ours to execute). None when it cannot be told."""
    entry = handler(uname, root)
    path = entry.interpreter if entry else ""
    if not path:
        return None
    target = (root / path.lstrip("/")).resolve()
    try:
        if not target.is_file() or target.stat().st_size > _MAX_INTERPRETER:
            return None
        data = target.read_bytes()
    except OSError:
        return None
    m = _VERSION.search(data.decode("latin-1"))
    return ".".join(g for g in m.groups() if g is not None) if m else None


def emulation_note(uname: str, root: Path = Path("/")) -> str:
    """What the smoke results say of the emulator: its version, and a warning when it is older than the one this
    project ran torch under."""
    version = emulator_version(uname, root)
    if version is None:
        return "QEMU (version unknown)"
    if int(version.split(".")[0]) < TESTED_QEMU_MAJOR:
        return (f"QEMU {version}, older than {TESTED_QEMU_MAJOR}.0: torch 2.13's aarch64 CPU kernels crashed under "
                f"QEMU 7.2 (scripts/binfmt.sh registers {TESTED_QEMU_MAJOR}.0)")
    return f"QEMU {version}"
