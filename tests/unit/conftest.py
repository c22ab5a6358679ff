"""Shared set-up for the unit tests (no engine needed; tests may fake one).

Helpers that several test files use live in underscore modules beside the tests, imported by their top-level name
(this folder is put on sys.path here so that works under any pytest import mode):
    _fake_engine.py   THE fake engine: the image store protocol (engine/store.py) in memory, for every test
    _fake_registry.py THE fake registry: what oci.RegistryClient answers, over dicts of manifests and blobs
    _support.py       hand-made ImagePlans for the build tests (tests/unit/test_build_*.py)
    _push_fakes.py    push set-up: plan rows, engine push streams, the fake engine and registry wired (test_push_*.py)
    _render_cases.py  the resolved variants the golden render tests use (test_render_*.py)
    _torch_venv.py    a python with the CPU torch wheel (fixture torch_python: the probe tests that run torch)
    _nvidia_wheels.py real NVIDIA wheels from PyPI, cached once and pinned by sha256 (coverage and NCCL tests)
A test module never imports another test module or conftest (tests/unit/test_import_rules.py checks it).
"""

from __future__ import annotations

import sys
from pathlib import Path

UNIT_DIR = Path(__file__).resolve().parent
if str(UNIT_DIR) not in sys.path:
    sys.path.insert(0, str(UNIT_DIR))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path, monkeypatch):
    """Every test gets its own record folder (.imagebuild/ would otherwise be the working directory's)."""
    monkeypatch.setenv("IMAGEBUILD_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(autouse=True)
def _no_docker_cli(monkeypatch):
    """No unit test asks a real engine through the docker CLI (`--backend auto`, buildx): a CLI that is not there,
    so auto chooses the classic builder as on a machine without docker; tests/unit/test_buildx_build.py's fake
    `docker` script replaces it where a test needs answers."""
    monkeypatch.setenv("IMAGEBUILD_DOCKER_CLI", "/nonexistent/docker")


@pytest.fixture(scope="session")
def torch_python() -> str:
    """A python that imports the CPU torch wheel (made once per machine, see _torch_venv.py)."""
    from _torch_venv import torch_python as make

    return make()


def pytest_collection_modifyitems(config, items):
    """A test that asks for `torch_python` runs a real torch: marked `torch`, so `make test-unit` (-m "not torch")
    stays quick while `make test` and CI run it."""
    for item in items:
        if "torch_python" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.torch)
