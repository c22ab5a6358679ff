"""The resolve stage's script (render/tiering.py) against an index with no PEP 658 metadata files, run as the stage
runs it (its own process, a clean pip configuration), with real pip: the image venv's pip (this venv's) and pip 26.3
fetched from the index into the stage's scratch folder (pinned by sha256: the cached wheel here is the same file),
never into the environment it resolves for.

The index is a local HTTP server whose files answer range requests correctly, not at all, or with wrong bytes. It
counts the bytes it sends for each file: on a server with ranges a resolution reads a few KB of a 4 MB wheel, not
the wheel; without them (or with broken ones) the whole wheel, and the tiers are the same in every case.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from _nvidia_wheels import PIP, WHEELS, wheel

from imagebuild.render import tiering

SCRIPT = Path(tiering.__file__)
PIP_FILE = WHEELS[PIP][0]
BLOB = 4 << 20  # the big wheel's payload, stored (not deflated): a whole download is at least this


def _wheel(name: str, version: str, requires: list[str], payload: bytes = b"") -> tuple[str, bytes]:
    """A minimal valid wheel whose METADATA is written last (as wheel builders do), after `payload`."""
    dist = f"{name}-{version}.dist-info"
    meta = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        if payload:
            zf.writestr(zipfile.ZipInfo(f"{name}/blob.bin"), payload, compress_type=zipfile.ZIP_STORED)
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/METADATA", meta)
        zf.writestr(f"{dist}/RECORD", "")
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


class Index(ThreadingHTTPServer):
    """/simple/<project>/ pages (no data-dist-info-metadata) and /files/<wheel> answering Range as `ranges` says:
    "yes" (206 with the asked bytes), "no" (the whole file, 200, no Accept-Ranges) or "broken" (206, zeros)."""

    def __init__(self, files: dict[str, bytes], ranges: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files, self.ranges, self.sent = files, ranges, Counter()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/simple/"


class _Handler(BaseHTTPRequestHandler):
    server: Index

    def log_message(self, *args):  # quiet
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        files = self.server.files
        m = re.fullmatch(r"/simple/([^/]+)/", self.path)
        if m:
            links = "".join(f'<a href="/files/{n}#sha256={hashlib.sha256(d).hexdigest()}">{html.escape(n)}</a>\n'
                            for n, d in sorted(files.items()) if tiering.canonical(n.split("-")[0]) == m.group(1))
            if not links:
                self.send_error(404)
                return
            self._send(200, f"<html><body>\n{links}</body></html>".encode(), "text/html", body)
            return
        name = self.path.removeprefix("/files/")
        if name not in files:
            self.send_error(404)
            return
        data = files[name]
        asked = self.headers.get("Range", "")
        r = re.fullmatch(r"bytes=(\d*)-(\d*)", asked)
        if not r or self.server.ranges == "no":
            self._send(200, data, "application/octet-stream", body, name=name)
            return
        start, end = r.groups()
        first, last = (len(data) - int(end), len(data) - 1) if not start else (int(start), int(end or len(data) - 1))
        first, last = max(first, 0), min(last, len(data) - 1)
        part = data[first:last + 1] if self.server.ranges == "yes" else bytes(last + 1 - first)
        self._send(206, part, "application/octet-stream", body, name=name,
                   extra={"Content-Range": f"bytes {first}-{last}/{len(data)}"})

    def _send(self, code, data, kind, body, name=None, extra=None):
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        if self.server.ranges != "no":
            self.send_header("Accept-Ranges", "bytes")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data)
            if name:
                self.server.sent[name] += len(data)


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    out = dict([_wheel("bigpkg", "1.0", ["dep>=1"], os.urandom(BLOB)), _wheel("dep", "1.0", []),
                _wheel("dep", "2.0", []), _wheel("leafpkg", "1.17.0", [])])
    out[PIP_FILE] = wheel(PIP).read_bytes()
    return out


SPEC = {"tiers": [{"name": "big", "owns": ["bigpkg"], "requires": ["bigpkg==1.0"]},
                  {"name": "matrix", "owns": [], "requires": ["leafpkg"]}]}


def resolve(tmp_path: Path, index: Index, spec=SPEC) -> subprocess.CompletedProcess:
    """The stage's command line: the script, its spec, its output folder, and the build's pip options."""
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1")  # the base image sets PIP_NO_CACHE_DIR
    thread = threading.Thread(target=index.serve_forever, daemon=True)
    thread.start()
    try:
        return subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "spec.json"), str(tmp_path / "out"), "--",
                               "--index-url", index.url], capture_output=True, text=True, env=env, timeout=300,
                              cwd=tmp_path)
    finally:
        index.shutdown()
        index.server_close()


def tiers_written(tmp_path: Path) -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted((tmp_path / "out").glob("*.txt"))}


EXPECTED = {"big": "bigpkg==1.0\ndep==2.0\n", "matrix": "leafpkg==1.17.0\n"}
BIG = "bigpkg-1.0-py3-none-any.whl"


def test_an_index_with_ranges_gives_the_same_tiers_reading_a_few_kilobytes_of_each_wheel(tmp_path, files):
    index = Index(files, "yes")
    proc = resolve(tmp_path, index)
    assert proc.returncode == 0, proc.stderr
    assert tiers_written(tmp_path) == EXPECTED
    assert 0 < index.sent[BIG] < 256 << 10, index.sent  # the final and the tier resolution: never the 4 MB
    assert "HTTP range requests" in proc.stdout and "resolving again" not in proc.stdout
    assert "not ready for production" not in proc.stderr  # pip's per-run warning: said once, in our words
    assert not (tmp_path / "out" / "pip").exists() and PIP_FILE in index.sent  # pip 26.3 fetched, never into OUT


def test_an_index_without_ranges_sends_whole_wheels_and_the_tiers_are_the_same(tmp_path, files):
    index = Index(files, "no")
    proc = resolve(tmp_path, index)
    assert proc.returncode == 0, proc.stderr
    assert tiers_written(tmp_path) == EXPECTED
    assert index.sent[BIG] >= BLOB


def test_wrong_bytes_for_a_range_give_the_same_tiers_from_whole_wheels(tmp_path, files):
    """A proxy that answers ranges with the wrong bytes: pip fails ("Wheel 'bigpkg' ... is invalid"), the script
    says so once and resolves from whole wheels for the rest of the stage; never a resolution from broken bytes."""
    index = Index(files, "broken")
    proc = resolve(tmp_path, index)
    assert proc.returncode == 0, proc.stderr
    assert tiers_written(tmp_path) == EXPECTED
    assert index.sent[BIG] >= BLOB
    assert proc.stdout.count("resolving again with whole wheels") == 1  # pip 26.3 fails on them: we retry


def test_requirements_that_cannot_resolve_fail_once_without_a_retry(tmp_path, files):
    spec = {"tiers": [{"name": "big", "owns": ["bigpkg"], "requires": ["bigpkg==9.0"]},
                      {"name": "matrix", "owns": [], "requires": []}]}
    proc = resolve(tmp_path, Index(files, "yes"), spec)
    assert proc.returncode != 0
    assert "resolving again" not in proc.stdout and "bigpkg==9.0" in proc.stderr
    assert not tiers_written(tmp_path)


def test_an_index_without_a_newer_pip_resolves_with_the_venvs_own(tmp_path, files):
    without_pip = {n: d for n, d in files.items() if n != PIP_FILE}
    proc = resolve(tmp_path, Index(without_pip, "yes"))
    assert proc.returncode == 0, proc.stderr
    assert tiers_written(tmp_path) == EXPECTED
    if tiering.pip_version(sys.executable, os.environ) < tiering.LAZY_WHEEL_PIP:
        assert "no pip 25.3+ from the index" in proc.stdout and "HTTP range requests" not in proc.stdout


def test_a_pip_on_the_index_that_is_not_the_pinned_file_never_runs(tmp_path, files):
    """The index serves other bytes under pip 26.3's name: pip's --require-hashes refuses them, nothing of them is
    run, and the venv's own pip resolves the same tiers."""
    forged = dict(files)
    forged[PIP_FILE] = files[PIP_FILE] + b"\0"  # still a readable zip (trailing bytes), not the pinned file
    index = Index(forged, "yes")
    proc = resolve(tmp_path, index)
    assert proc.returncode == 0, proc.stderr
    assert tiers_written(tmp_path) == EXPECTED
    assert index.sent[PIP_FILE] > 0 and "HTTP range requests" not in proc.stdout
    assert "no pip 25.3+ from the index" in proc.stdout and "hash" in proc.stdout.lower()
