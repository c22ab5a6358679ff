"""Hostile registry answers (issue 25): a proxy's login page instead of JSON, a manifest without config, labels,
sizes and dates of the wrong type, a manifest larger than any registry serves. `catalog` and `sbom` of a registry
image say one RegistryError naming the image and the field (exit 1), never a traceback; the client reads at most
its limit; catalog cells are escaped so a label cannot add table rows or raw HTML."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from _fake_registry import FakeRegistry

from imagebuild.catalog import Header, collect, render_markdown
from imagebuild.oci import Reference, RegistryAuth, RegistryClient, RegistryError
from imagebuild.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
REG = "reg.test:5000/ml"
GOOD_CONFIG = {"architecture": "amd64", "os": "linux", "created": "2026-11-30T10:00:00Z",
               "config": {"Labels": {"io.imagebuild.flavor": "base"}},
               "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]}}
LAYER = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + "2" * 64, "size": 10}


@pytest.fixture(scope="module")
def plan():
    return make_plan(ROOT / "images" / "cpu.yaml", None, REG)


def _serve(reg: FakeRegistry, repository: str, tag: str, config: object = None, manifest: object = None,
           config_bytes: bytes | None = None, manifest_bytes: bytes | None = None) -> None:
    """Put an image under `tag`: the config (or raw bytes) as a blob, the manifest (or raw bytes) naming it."""
    body = config_bytes if config_bytes is not None else json.dumps(config if config is not None else GOOD_CONFIG).encode()
    cfg = reg.put_blob(body)
    doc = manifest if manifest is not None else {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": len(body)},
        "layers": [LAYER]}
    reg.put_manifest(repository, tag, manifest_bytes if manifest_bytes is not None else json.dumps(doc).encode())


def _config(**over: object) -> dict:
    return {**GOOD_CONFIG, **over}


CASES = {
    "labels-a-list": (dict(config=_config(config={"Labels": ["a", "b"]})), "Labels is not an object"),
    "label-a-number": (dict(config=_config(config={"Labels": {"io.imagebuild.torch": 2.9}})),
                       "label 'io.imagebuild.torch' is not a string"),
    "config-a-list": (dict(config=_config(config=["x"])), "`config` is not an object"),
    "created-a-number": (dict(config=_config(created=20261130)), "created is not a string"),
    "config-not-json": (dict(config_bytes=b"<html><body>Please log in</body></html>"), "not JSON"),
    "no-config": (dict(manifest={"schemaVersion": 2, "layers": [LAYER]}), "the manifest has no config"),
    "size-text": (dict(manifest={"schemaVersion": 2, "config": {"digest": "sha256:" + "3" * 64, "size": 5},
                                 "layers": [{**LAYER, "size": "big"}]}), "size 'big' is not a byte count"),
    "layers-an-object": (dict(manifest={"schemaVersion": 2, "config": {"digest": "sha256:" + "3" * 64, "size": 5},
                                        "layers": {"a": 1}}), "layers are not a list"),
    "manifest-not-json": (dict(manifest_bytes=b"<!DOCTYPE html><title>Sign in</title>"), "not JSON"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_catalog_says_what_is_wrong_with_a_registry_answer(plan, tmp_path, case):
    """Failed before (each): AttributeError / ValueError / TypeError tracebacks, or (no config) a row of nothing."""
    kwargs, words = CASES[case]
    image = plan.images[0]
    ref = Reference.parse(image.tag)
    reg = FakeRegistry(ref.registry)
    _serve(reg, ref.repository, ref.tag or "", **kwargs)
    with pytest.raises(RegistryError) as bad:
        collect(plan, lambda host: reg, tmp_path / "none.state.json")
    assert words in str(bad.value) and "\n" not in str(bad.value)
    if case != "manifest-not-json":
        assert image.tag in str(bad.value)  # names the image


@pytest.mark.parametrize("case", ["no-config", "manifest-not-json", "labels-a-list", "size-text", "created-a-number"])
def test_sbom_of_a_registry_image_says_what_is_wrong(case):
    """Failed before: json.loads of a login page (ValueError), doc["config"] (KeyError), labels.items() on a list."""
    from imagebuild.inventory.from_registry import read_registry

    kwargs, words = CASES[case]
    reg = FakeRegistry("reg.test:5000")
    _serve(reg, "ml/x", "t", **kwargs)
    with pytest.raises(RegistryError) as bad:
        read_registry(reg, Reference.parse("reg.test:5000/ml/x:t"))  # type: ignore[arg-type]
    assert words in str(bad.value) and "reg.test:5000/ml/x:t" in str(bad.value)


def test_catalog_cells_cannot_add_rows_or_html(plan, tmp_path):
    """Failed before: `<script>` and backticks reached the Markdown as-is (raw HTML, a code span)."""
    image = plan.images[0]
    ref = Reference.parse(image.tag)
    reg = FakeRegistry(ref.registry)
    hostile = "2.9.1 |x| y |\n| evil | row |<script>alert(1)</script> `code` &amp; [a](http://e)"
    _serve(reg, ref.repository, ref.tag or "", config=_config(config={"Labels": {
        **image.labels, "io.imagebuild.torch": hostile, "io.imagebuild.flavor": "<b>base</b>|x"}}))
    entries = collect(plan, lambda host: reg, tmp_path / "none.state.json")
    text = render_markdown(entries, Header("m", REG, ("ml/x",), "2026-12-01T00:00:00Z", "r"))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(entries)  # the header and one row per tag: no row added
    assert "<script>" not in text and "<b>" not in text and "`code`" not in text and "[a](" not in text
    assert "&lt;script&gt;" in text and "&amp;amp;" in text
    row = next(r for r in rows if f"`{ref.tag}`" in r)
    assert row.count(" | ") == len(rows[0].split(" | ")) - 1  # every `|` of the label escaped


class _Huge(BaseHTTPRequestHandler):
    """A registry that answers /v2/ and then a 5 MiB manifest, with or without Content-Length."""

    sent = 0

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/v2/":
            body = b"{}"
        else:
            body = b'{"a":"' + b"x" * (5 << 20) + b'"}'
        self.send_response(200)
        if not self.path.endswith("unsized"):
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        self.end_headers()
        try:
            for i in range(0, len(body), 1 << 16):
                self.wfile.write(body[i:i + (1 << 16)])
                type(self).sent += min(1 << 16, len(body) - i)
        except OSError:  # the client stopped reading: what the limit is for
            pass


@pytest.mark.parametrize("tag", ["sized", "unsized"])
def test_a_manifest_larger_than_the_limit_is_refused_unread(tag):
    """Failed before: the client read the whole answer into memory and parsed it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Huge)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        client = RegistryClient(RegistryAuth(f"127.0.0.1:{server.server_address[1]}"), retries=0)
        with pytest.raises(RegistryError, match="larger than 4194304 bytes"):
            client.manifest_raw("ml/x", tag)
        with pytest.raises(RegistryError, match="larger than"):
            client.manifest("ml/x", tag)
    finally:
        server.shutdown()
        server.server_close()
