"""Build the probe as ONE file: a zipapp (`probe.pyz`) holding this `probe` package and a `__main__.py` that calls
probe.__main__.main. Any python >= 3.8 runs it (`python probe.pyz --sections ...`), children included
(common.child_argv re-runs the same file). Standard library only: usable without imagebuild installed,
e.g. `PYTHONPATH=<dir holding probe/> python3 -c 'from probe.pack import build_zipapp; build_zipapp("p.pyz")'`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import zipapp
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_LOCK = threading.Lock()
_BUILT: dict = {}


def build_zipapp(target, interpreter: str | None = "/usr/bin/env python3") -> Path:
    """Write the zipapp to `target` (compressed; a shebang line so it also runs as ./probe.pyz) and return its path."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ibprobe-pyz-") as stage:
        # stage a copy: the archive root is a directory holding only `probe/`, whatever sits next to the package
        shutil.copytree(PACKAGE_DIR, Path(stage) / "probe", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        zipapp.create_archive(stage, target, interpreter=interpreter, main="probe.__main__:main", compressed=True)
    return target


def zipapp_path() -> Path:
    """The probe zipapp, built once per process into a private temp directory (removed at exit)."""
    with _LOCK:
        path = _BUILT.get("path")
        if path is None or not path.exists():
            d = tempfile.mkdtemp(prefix="ibprobe-")
            atexit.register(shutil.rmtree, d, True)
            path = build_zipapp(Path(d) / "probe.pyz")
            _BUILT["path"] = path
        return path
