"""The engine's API over its unix socket, for the image store's questions a run asks before it builds anything.

`imagebuild build` with every image up to date (the whole-process no-op) asks the engine only about images: inspect,
history, an alias tag, images by label, whether it pulls zstd. Loading the docker SDK for that (with requests and
urllib3) costs more than all of those calls together, so `connect(purpose, lazy=True)` answers them here, over the
same socket and API version the SDK would use (DOCKER_HOST `unix://PATH`, else the default socket; the version the
engine names, as the SDK's `version="auto"` asks it), and makes the SDK client only when something else is asked
(`LazyClient`; its `info()` is the socket's too): a build, a pull, a container, a push. Errors read as the SDK's do: the engine's `message` as
EngineError with its status, "no such image" as None (store.py). Nothing outside engine/ sees this module.

    engine = EngineSocket("/var/run/docker.sock", timeout=120)
    engine.negotiate()                                     # GET /version: API version, engine version
    engine.get("/images/{}/json", "ubuntu:24.04")         # the inspect answer (EngineError: the engine's refusal)
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from imagebuild.engine.stream import EngineError

if TYPE_CHECKING:
    import docker

DEFAULT_SOCKET = "/var/run/docker.sock"  # the SDK's default (DOCKER_HOST unset)
# the SDK's fragments of a 404 that means "no such image" (docker.errors: ImageNotFound rather than NotFound)
IMAGE_NOT_FOUND = ("no such image", "not found: does not exist or no pull access", "repository does not exist",
                   "was found but does not match the specified platform")
# what the SDK client offers that a LazyClient hands on (making the SDK client first)
SDK_NAMES = frozenset({"api", "configs", "containers", "df", "events", "images", "login", "networks", "nodes", "ping",
                       "plugins", "secrets", "services", "swarm", "version", "volumes"})


def socket_path() -> str | None:
    """The unix socket DOCKER_HOST names (unset: the default socket), or None when the SDK must do the connecting
    (tcp, ssh, TLS settings, a relative or empty path)."""
    if os.environ.get("DOCKER_TLS_VERIFY") or os.environ.get("DOCKER_CERT_PATH"):
        return None
    host = os.environ.get("DOCKER_HOST")
    if not host:
        return DEFAULT_SOCKET
    if not host.startswith("unix://"):
        return None
    path = host[len("unix://"):]
    return path if path.startswith("/") else None


class NotFound(EngineError):
    """HTTP 404 from the engine (an image the store asks about: None there)."""

    def __init__(self, message: str, *, image: bool) -> None:
        super().__init__(message, 404)
        self.image = image


class _Connection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class EngineSocket:
    """HTTP/1.1 to the engine's socket: one kept-alive connection per thread, `timeout` seconds for each read."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path, self.timeout = path, timeout
        self.api_version = ""  # negotiate(): the version the engine names, as the SDK's "auto"
        self.engine_version = ""  # negotiate(): the engine's own version (e.g. 26.1.5)
        self._local = threading.local()
        self._all: list[_Connection] = []
        self._lock = threading.Lock()

    def negotiate(self) -> None:
        """GET /version (unversioned): the API version every later call names, and the engine's version."""
        doc = self.get("/version", versioned=False)
        self.api_version = str(doc["ApiVersion"])
        self.engine_version = str(doc.get("Version") or "")

    def _connection(self) -> _Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _Connection(self.path, self.timeout)
            with self._lock:
                self._all.append(conn)
        return conn

    def request(self, method: str, path: str, *args: str, params: Mapping[str, Any] | None = None,
                versioned: bool = True) -> tuple[int, bytes]:
        """(status, body) of METHOD path (`{}` filled with `args`, quoted as the SDK quotes them)."""
        url = path.format(*(urllib.parse.quote(a, safe="/:") for a in args))
        if versioned:
            url = f"/v{self.api_version}{url}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, url, headers={"User-Agent": "imagebuild"})
                response = conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()  # the engine closed a kept-alive connection: once more on a new one
                if attempt == 2:
                    raise EngineError(f"the engine at {self.path} did not answer: {exc}", connection=True) from exc
            except (OSError, http.client.HTTPException) as exc:  # no engine there, a timeout, a broken answer
                conn.close()
                raise EngineError(f"the engine at {self.path} did not answer: {exc}", connection=True) from exc
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")

    def get(self, path: str, *args: str, params: Mapping[str, Any] | None = None, versioned: bool = True) -> Any:
        """The JSON answer of GET path; EngineError (NotFound for 404) with the engine's message otherwise."""
        status, body = self.request("GET", path, *args, params=params, versioned=versioned)
        check(status, body)
        return json.loads(body)

    def post(self, path: str, *args: str, params: Mapping[str, Any] | None = None) -> int:
        status, body = self.request("POST", path, *args, params=params)
        check(status, body)
        return status

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()


def check(status: int, body: bytes) -> None:
    """An engine refusal (HTTP >= 400) as the SDK reads it: the JSON `message`, else the text."""
    if status < 400:
        return
    text = body.decode("utf-8", "replace")
    try:
        explanation = str(json.loads(text)["message"])
    except (ValueError, KeyError, TypeError):
        explanation = text.strip()
    if status == 404:
        raise NotFound(explanation, image=any(f in explanation.lower() for f in IMAGE_NOT_FOUND))
    raise EngineError(explanation, status)


class LazyClient:
    """What `connect(purpose, lazy=True)` gives: the engine socket for the image store's questions (store.py:
    SocketImageStore), and the docker SDK client made on the first use of anything else (SDK_NAMES), with the
    same timeout and the API version already negotiated (no second /version). Typed as a docker.DockerClient."""

    def __init__(self, engine: EngineSocket, timeout: float) -> None:
        self.engine, self._timeout = engine, timeout
        self._sdk: docker.DockerClient | None = None
        self._lock = threading.Lock()

    def sdk(self) -> docker.DockerClient:
        with self._lock:
            if self._sdk is None:
                import docker

                self._sdk = docker.from_env(timeout=int(self._timeout), version=self.engine.api_version)
            return self._sdk

    def info(self) -> Any:
        """GET /info, as `docker.DockerClient.info()` (the data-root the disk check reads, the engine's machine)."""
        return self.engine.get("/info")

    def __getattr__(self, name: str) -> Any:
        if name not in SDK_NAMES:  # never make the SDK client for a probe (hasattr, a Protocol's isinstance)
            raise AttributeError(name)
        return getattr(self.sdk(), name)

    def close(self) -> None:
        self.engine.close()
        with self._lock:
            sdk, self._sdk = self._sdk, None
        if sdk is not None:
            sdk.close()
