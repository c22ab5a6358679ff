"""Can this machine run another architecture's binaries? binfmt_misc's QEMU handler, read under a root directory.

An arm64 image is built and tested on an amd64 machine through QEMU user emulation: the kernel hands every aarch64
ELF binary to the handler registered as `qemu-aarch64` in binfmt_misc. Inside a container (a RUN step, the smoke
suite, mmdebstrap's chroot) the handler's interpreter path does not exist, so the handler must carry the F flag (the
kernel opens the interpreter when it is registered). scripts/binfmt.sh registers Debian's qemu-user-static handler
that way; this module only reads (tests use recorded trees).
"""

from __future__ import annotations

from pathlib import Path

BINFMT_DIR = Path("proc/sys/fs/binfmt_misc")


def missing_emulation(uname: str, root: Path = Path("/")) -> str | None:
    """Why binaries of `uname` (aarch64) cannot run here under emulation; None when they can (the handler is
    registered, enabled and has the F flag)."""
    folder = root / BINFMT_DIR
    if not (folder / "register").exists():
        return f"binfmt_misc is not mounted on /{BINFMT_DIR}"
    try:
        text = (folder / f"qemu-{uname}").read_text()
    except OSError:
        return f"no qemu-{uname} handler is registered in binfmt_misc"
    lines = text.splitlines()
    if "enabled" not in lines:
        return f"the qemu-{uname} handler in binfmt_misc is disabled"
    flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
    if "F" not in flags:
        return (f"the qemu-{uname} handler in binfmt_misc lacks the F flag (flags {flags or 'none'}): its interpreter "
                "is not found inside containers")
    return None
