"""A python with the CPU torch wheel, for the probe tests that run torch for real (AMP, gloo, torch.compile, the
watchdog). IMAGEBUILD_SMOKE_PYTHON names one; else a venv is made once per machine under /var/tmp from the
wheelhouse (PIP_FIND_LINKS, the same CPU wheel the CPU images install) and reused by later runs, under a lock so
parallel test runs make it once. Without a torch wheel for this interpreter the tests skip, saying so; under
IMAGEBUILD_REQUIRE_ENGINE=1 (CI, `make test`) they fail instead.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

TORCH = "torch==2.13.0"
EXTRA = ("numpy",)  # torch warns "Failed to initialize NumPy" without it; the CPU images install it too
CACHE = Path(os.environ.get("IMAGEBUILD_TORCH_VENV_DIR", "/var/tmp/imagebuild-torch-venvs"))


def _works(python: Path) -> bool:
    return python.exists() and subprocess.run([str(python), "-c", "import torch"], capture_output=True,
                                              timeout=300).returncode == 0


def torch_python() -> str:
    """The interpreter's path; pytest.skip / pytest.fail (see the module docstring) when none can be made."""
    named = os.environ.get("IMAGEBUILD_SMOKE_PYTHON")
    if named:
        assert _works(Path(named)), f"IMAGEBUILD_SMOKE_PYTHON={named} does not import torch"
        return named
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}-{TORCH.replace('==', '-')}"
    home = CACHE / tag
    python = home / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / ".complete").exists() and _works(python):
            return str(python)
        venv.EnvBuilder(clear=True, with_pip=True).create(home)
        out = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--only-binary=:all:", TORCH, *EXTRA],
                             capture_output=True, text=True, timeout=1800)
        if out.returncode != 0 or not _works(python):
            why = (f"no CPU torch for this python: pip install {TORCH} (find-links "
                   f"{os.environ.get('PIP_FIND_LINKS', 'unset')}) failed: "
                   + " | ".join(out.stderr.strip().splitlines()[-2:]))
            if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
                pytest.fail(why)
            pytest.skip(why)
        (home / ".complete").write_text(TORCH + "\n")
    return str(python)
