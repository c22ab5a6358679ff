"""The TE wheel cache: a wheel copied out of the built scratch image lands complete (meta.json with the build's
seconds) or not at all."""

from __future__ import annotations

import io
import json
import tarfile
import time
import types

import pytest
from _fake_engine import FakeEngine

from imagebuild.builder import te_cache


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _run(archive: bytes):
    engine = FakeEngine()
    engine.archives["sha256:img"] = archive
    return types.SimpleNamespace(store=engine)


def test_extract_writes_the_wheel_and_meta_once(tmp_path, monkeypatch):
    monkeypatch.setenv(te_cache.CACHE_ENV, str(tmp_path))
    whl = "transformer_engine_torch-2.10.0-cp312-cp312-linux_x86_64.whl"
    run = _run(_tar({f"te-wheels/{whl}": b"wheel", "te-wheels/notes.txt": b"x"}))
    wheel, seconds = te_cache._extract(run, "sha256:img", "k" * 64, time.monotonic() - 5)
    assert wheel == whl and 5 <= seconds < 60 and run.store.copies == [("sha256:img", "/te-wheels")]
    d = te_cache.cached("k" * 64)
    assert d is not None and sorted(p.name for p in d.iterdir()) == ["meta.json", whl]
    assert json.loads((d / "meta.json").read_text())["seconds"] == seconds


def test_extract_without_the_extension_wheel_leaves_no_entry(tmp_path, monkeypatch):
    monkeypatch.setenv(te_cache.CACHE_ENV, str(tmp_path))
    run = _run(_tar({"te-wheels/other-1.0-py3-none-any.whl": b"x"}))
    with pytest.raises(te_cache.TEWheelError, match="no transformer_engine_torch wheel"):
        te_cache._extract(run, "sha256:img", "k" * 64, time.monotonic())
    assert te_cache.cached("k" * 64) is None and list((tmp_path / "te-wheels").iterdir()) == []


def test_extract_replaces_a_planted_link_and_never_empties_its_target(tmp_path, monkeypatch):
    """Failed before: rmtree of a linked cache entry raised OSError (a traceback), and the rename could not land."""
    monkeypatch.setenv(te_cache.CACHE_ENV, str(tmp_path / "cache"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("precious")
    te_cache.wheel_dir("k" * 64).parent.mkdir(parents=True)
    te_cache.wheel_dir("k" * 64).symlink_to(elsewhere)
    whl = "transformer_engine_torch-2.10.0-cp312-cp312-linux_x86_64.whl"
    wheel, _ = te_cache._extract(_run(_tar({f"te-wheels/{whl}": b"wheel"})), "sha256:img", "k" * 64, time.monotonic())
    assert wheel == whl and (elsewhere / "keep").read_text() == "precious"
    d = te_cache.wheel_dir("k" * 64)
    assert not d.is_symlink() and sorted(p.name for p in d.iterdir()) == ["meta.json", whl]
