"""A fault-injecting HTTP proxy for registry tests (listens on 127.0.0.1 only).

Each client connection carries exactly one request: the proxy rewrites the request to `Connection: close`, so the
upstream closes after its answer and the next request arrives on a new connection where the next fault can apply.
Faults are consumed in order; each waits for the first request it matches:

  Fault("503")            answer 503 Service Unavailable (registry error JSON) without asking upstream
  Fault("reset-upload")   a blob upload (PATCH/PUT with a body under /blobs/uploads/): forward the head and half of
                          the first body bytes, then reset both connections (RST, SO_LINGER 0)
  Fault("reset")          reset the client connection right after reading the request head
  Fault("refuse-oci")     a manifest PUT with an OCI media type: answer 400 MANIFEST_INVALID without asking upstream
                          (a registry that predates OCI manifests / zstd layers)

A TLS ClientHello (the engine tries https first) gets a plain `400` at once, as a plain-HTTP registry answers, so
the engine falls back to http without waiting for its 10 s TLS handshake timeout.
`match` narrows which requests a fault applies to (e.g. only the Docker daemon's, by User-Agent).
Counters: bytes_up (client -> registry, what was actually forwarded), bytes_down, and `log` of every request.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names

    @property
    def has_body(self) -> bool:
        te = self.headers.get("transfer-encoding", "").lower()
        return "chunked" in te or int(self.headers.get("content-length", "0") or 0) > 0

    @property
    def user_agent(self) -> str:
        return self.headers.get("user-agent", "")


@dataclass
class Fault:
    kind: str  # "503" | "reset-upload" | "reset"
    match: Callable[[Request], bool] | None = None

    def applies(self, req: Request) -> bool:
        if self.match is not None and not self.match(req):
            return False
        if self.kind == "reset-upload":
            return req.method in ("PATCH", "PUT") and "/blobs/uploads/" in req.path and req.has_body
        if self.kind == "refuse-oci":
            return req.method == "PUT" and "/manifests/" in req.path and "vnd.oci." in req.headers.get(
                "content-type", "")
        return True


def from_copier(req: Request) -> bool:
    """Requests made by what writes the image (skopeo, for `imagebuild push`), not by imagebuild's own client."""
    return not req.user_agent.lower().startswith("imagebuild/")


def from_docker(req: Request) -> bool:
    """Requests made by the Docker daemon (not by imagebuild's own registry client)."""
    return req.user_agent.lower().startswith("docker/")


@dataclass
class LogEntry:
    method: str
    path: str
    action: str  # "pass" | "503" | "reset-upload" | "reset" | "refuse-oci"
    user_agent: str
    up: int = 0
    down: int = 0


_ERROR_OCI = (b'{"errors":[{"code":"MANIFEST_INVALID","message":"manifest invalid","detail":"unsupported media type '
              b'(injected by faultproxy)"}]}\n')
_ERROR_503 = b'{"errors":[{"code":"UNAVAILABLE","message":"service unavailable (injected by faultproxy)"}]}\n'


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], faults: list[Fault] | None = None):
        self.upstream = upstream
        self.faults: list[Fault] = list(faults or [])
        self.log: list[LogEntry] = []
        self.bytes_up = 0
        self.bytes_down = 0
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> int:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        s.settimeout(0.2)
        self._sock = s
        self.port = s.getsockname()[1]
        t = threading.Thread(target=self._accept_loop, name="faultproxy-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self.port

    def stop(self) -> None:
        self._stopping.set()
        if self._sock:
            self._sock.close()
        for t in list(self._threads):
            t.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pending_faults(self) -> list[str]:
        with self._lock:
            return [f.kind for f in self.faults]

    def reset_counters(self) -> None:
        with self._lock:
            self.bytes_up = self.bytes_down = 0
            self.log.clear()

    # -- per connection ----------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            t.start()
            self._threads = [x for x in self._threads if x.is_alive()] + [t]

    def _take_fault(self, req: Request) -> str:
        with self._lock:
            if self.faults and self.faults[0].applies(req):
                return self.faults.pop(0).kind
        return "pass"

    def _handle(self, client: socket.socket) -> None:
        upstream = None
        try:
            client.settimeout(60)
            head, rest = _read_head(client)
            if head is None:
                if rest.startswith(b"\x16"):  # a TLS ClientHello (the engine tries https first): answer as a
                    client.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")  # plain server
                return
            req = _parse_head(head)
            action = self._take_fault(req)
            entry = LogEntry(req.method, req.path, action, req.user_agent)
            with self._lock:
                self.log.append(entry)
            if action == "503":
                _send_503(client)
                return
            if action == "refuse-oci":
                _send_503(client, b"400 Bad Request", _ERROR_OCI)
                return
            if action == "reset":
                _reset(client)
                return
            upstream = socket.create_connection(self.upstream, timeout=60)
            upstream.sendall(_rewrite_head(head))
            if action == "reset-upload":
                body = rest or client.recv(65536)
                half = body[: max(1, len(body) // 2)]
                upstream.sendall(half)
                self._count(entry, up=len(half))
                _reset(upstream)
                upstream = None
                _reset(client)
                return
            if rest:
                upstream.sendall(rest)
                self._count(entry, up=len(rest))
            self._pipe(client, upstream, entry)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    def _count(self, entry: LogEntry, up: int = 0, down: int = 0) -> None:
        with self._lock:
            entry.up += up
            entry.down += down
            self.bytes_up += up
            self.bytes_down += down

    def _pipe(self, client: socket.socket, upstream: socket.socket, entry: LogEntry) -> None:
        client_open = True
        while True:
            watch = [upstream] + ([client] if client_open else [])
            readable, _, _ = select.select(watch, [], [], 120)
            if not readable:
                return
            if client_open and client in readable:
                data = client.recv(262144)
                if not data:
                    client_open = False
                    try:
                        upstream.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                else:
                    upstream.sendall(data)
                    self._count(entry, up=len(data))
            if upstream in readable:
                data = upstream.recv(262144)
                if not data:
                    return  # upstream answered and closed (Connection: close)
                client.sendall(data)
                self._count(entry, down=len(data))


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None, b""
        buf += data
        if buf.startswith(b"\x16"):
            return None, buf
        if len(buf) > 1 << 20:
            return None, b""
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head + b"\r\n\r\n", rest


def _parse_head(head: bytes) -> Request:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    method, path = (parts + ["", ""])[:2]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return Request(method, path, headers)


def _rewrite_head(head: bytes) -> bytes:
    lines = head.decode("latin-1").split("\r\n")
    kept = [lines[0]]
    for line in lines[1:]:
        if not line:
            continue
        name = line.split(":", 1)[0].strip().lower()
        if name in ("connection", "keep-alive", "proxy-connection"):
            continue
        kept.append(line)
    kept.append("Connection: close")
    return ("\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


def _send_503(client: socket.socket, status: bytes = b"503 Service Unavailable", body: bytes = _ERROR_503) -> None:
    client.sendall(
        b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json; charset=utf-8\r\n"
        b"Docker-Distribution-Api-Version: registry/2.0\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + b"Connection: close\r\n\r\n"
        + body
    )
    try:
        client.shutdown(socket.SHUT_WR)
        client.settimeout(0.5)
        while client.recv(65536):  # drain a request body so close() does not turn into a RST
            pass
    except OSError:
        pass


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass

