"""Locks: a matrix's exact pip files (by sha256) and apt versions, written next to it (images/cpu.lock).

model.py (the file: read, write, the build's requirements file, the digest that enters the inputs hash), check.py
(does a lock still fit the matrix: offline), pip.py / apt.py / generate.py (make one: pip's dry-run report, the
archive's Packages indexes). No engine and no docker import: plan and render use the model and the check.
"""

from imagebuild.lock.check import problems
from imagebuild.lock.model import (
    Lock,
    LockedImage,
    LockError,
    PipPin,
    dump,
    entry_digest,
    load,
    lock_path,
    parse,
    requirements_text,
)

__all__ = ["Lock", "LockError", "LockedImage", "PipPin", "dump", "entry_digest", "load", "lock_path", "parse",
           "problems", "requirements_text"]
