"""The engine's API over its unix socket (engine/unix.py) against a small stand-in engine on a socket of the test's
own: `connect(purpose, lazy=True)` negotiates the API version as the SDK's "auto" does, the image store asks inspect,
history, images by label and an alias tag over it without loading the docker SDK, errors read as the SDK's do, and
anything else makes the SDK client, on the same socket with the negotiated version."""

from __future__ import annotations

import json
import os
import socketserver
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from imagebuild.engine import connect
from imagebuild.engine.store import ImageStore, SocketImageStore, as_store
from imagebuild.engine.stream import EngineError
from imagebuild.engine.unix import LazyClient, NotFound, socket_path
from imagebuild.errors import EngineUnavailable

SRC = Path(__file__).resolve().parents[2] / "src"
IMAGE_ID = "sha256:" + "cd" * 32
TAG = "reg.example:5000/ml/x:1-base"
INFO = {"Id": IMAGE_ID, "RepoTags": [TAG], "Config": {"Labels": {"io.imagebuild.inputs-hash": "sha256:aa"}}}


class _Engine(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, dict[str, list[str]]]] = []
    drop_after_answer = False  # close the kept-alive connection after answering (without saying so)

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.drop_after_answer:
            self.close_connection = True

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        path, query = urllib.parse.unquote(url.path), urllib.parse.parse_qs(url.query)
        self.seen.append((method, path, query))
        if path == "/version":
            return self._answer(200, {"ApiVersion": "1.45", "Version": "26.1.5"})
        if path == "/v1.45/_ping":
            body = b"OK"
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(body)
            return None
        if path in (f"/v1.45/images/{TAG}/json", f"/v1.45/images/{IMAGE_ID}/json"):
            return self._answer(200, INFO)
        if path == "/v1.45/images/broken:1/json":
            return self._answer(500, {"message": "the engine broke"})
        if path == f"/v1.45/images/{IMAGE_ID}/history":
            return self._answer(200, [{"Size": 5, "CreatedBy": "RUN x"}])
        if path == f"/v1.45/images/{IMAGE_ID}/tag" and method == "POST":
            return self._answer(201, {})
        if path == "/v1.45/info":
            return self._answer(200, {"DockerRootDir": str(Path(self.server.server_address).parent),
                                      "Architecture": "x86_64"})
        if path == "/v1.45/images/json":
            return self._answer(200, [{"Id": IMAGE_ID, "RepoTags": [TAG], "Labels": INFO["Config"]["Labels"]}])
        if path.startswith("/v1.45/images/") and path.endswith("/json"):
            return self._answer(404, {"message": f"No such image: {path.split('/')[3]}"})
        return self._answer(404, {"message": "page not found"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._route("POST")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in engine on tmp_path/docker.sock, DOCKER_HOST pointing at it."""
    path = tmp_path / "docker.sock"
    _Engine.seen = []
    _Engine.drop_after_answer = False
    server = _Server(str(path), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(name, raising=False)
    yield path
    server.shutdown()
    server.server_close()


def test_the_image_stores_questions_go_over_the_socket(engine_socket):
    client = connect("inspect", lazy=True)
    assert isinstance(client, LazyClient) and client.engine.api_version == "1.45"
    store = as_store(client)
    assert isinstance(store, SocketImageStore) and not isinstance(client, ImageStore)
    assert store.inspect(TAG) == INFO and store.image_id(IMAGE_ID) == IMAGE_ID
    assert store.inspect("other:1") is None  # "No such image": None, as through the SDK
    assert store.history(IMAGE_ID) == [{"Size": 5, "CreatedBy": "RUN x"}]
    assert store.find({"io.imagebuild.inputs-hash": "sha256:aa"})[0]["Id"] == IMAGE_ID
    store.tag(IMAGE_ID, "reg.example:5000/ml/x", "1-alias")
    assert store.pulls_zstd()  # the engine's version from the negotiation: 26 >= 23, no call
    assert store.root_dir() == str(engine_socket.parent)  # GET /info (the disk check), no SDK either
    seen = {(m, p): q for m, p, q in _Engine.seen}
    assert seen[("POST", f"/v1.45/images/{IMAGE_ID}/tag")] == {"tag": ["1-alias"], "repo": ["reg.example:5000/ml/x"],
                                                               "force": ["0"]}
    assert json.loads(seen[("GET", "/v1.45/images/json")]["filters"][0]) == {"label": ["io.imagebuild.inputs-hash=sha256:aa"]}
    assert [p for _, p, _ in _Engine.seen].count("/version") == 1
    client.close()


def test_refusals_read_as_through_the_sdk(engine_socket):
    store = as_store(connect("inspect", lazy=True))
    with pytest.raises(EngineError, match="^the engine broke$") as exc:
        store.inspect("broken:1")
    assert exc.value.status == 500
    with pytest.raises(NotFound, match="page not found"):  # a 404 that is not "no such image": raised
        store.history("sha256:" + "00" * 32)
    with pytest.raises(EngineError, match="Resource ID was not provided"):
        store.inspect("")


def test_no_engine_on_the_socket_is_one_line_with_the_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(EngineUnavailable) as exc:
        connect(timeout=2, lazy=True)
    msg = str(exc.value)
    assert "\n" not in msg and f"DOCKER_HOST=unix://{tmp_path}/nothing.sock" in msg
    assert "scripts/docker-engine.sh" in msg


def test_a_connection_the_engine_dropped_is_made_again(engine_socket):
    _Engine.drop_after_answer = True
    store = as_store(connect("inspect", lazy=True))
    for ref in (TAG, IMAGE_ID, "other:1"):  # each on a new connection after the engine closed the last one
        store.inspect(ref)
    assert [p for _, p, _ in _Engine.seen][-3:] == [f"/v1.45/images/{r}/json" for r in (TAG, IMAGE_ID, "other:1")]


def test_the_sdk_is_loaded_only_for_what_the_socket_does_not_answer(engine_socket):
    """A fresh interpreter: the store's questions leave `docker` unloaded; `client.api` makes the SDK client on the
    same socket with the negotiated version (no second /version)."""
    code = ("import sys\n"
            "from imagebuild.engine import as_store, connect\n"
            "client = connect('inspect', lazy=True)\n"
            "store = as_store(client)\n"
            f"store.inspect({TAG!r}); store.history({IMAGE_ID!r}); store.root_dir(); hasattr(client, 'inspect')\n"
            "print('docker' in sys.modules)\n"
            f"print(client.api.inspect_image({IMAGE_ID!r})['Id'], client.api._version)\n"
            "print('docker' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", IMAGE_ID, "1.45", "True"]
    assert [p for _, p, _ in _Engine.seen].count("/version") == 1


def test_which_hosts_go_over_the_socket(monkeypatch):
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(name, raising=False)
    assert socket_path() == "/var/run/docker.sock"  # the SDK's default
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/tmp/e/docker.sock")
    assert socket_path() == "/var/tmp/e/docker.sock"
    for host in ("tcp://127.0.0.1:2375", "ssh://me@host", "unix://relative.sock"):
        monkeypatch.setenv("DOCKER_HOST", host)
        assert socket_path() is None  # the SDK connects
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/tmp/e/docker.sock")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    assert socket_path() is None
