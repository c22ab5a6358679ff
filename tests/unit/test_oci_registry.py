"""RegistryClient against a small fake Distribution v2 server (stdlib http.server on 127.0.0.1)."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from imagebuild.oci import RegistryAuth, RegistryAuthError, RegistryClient, RegistryError, registry_message
from imagebuild.oci.registry import MANIFEST_TYPES

MANIFEST = b'{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json"}'
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
BLOB = b"layer bytes " * 1000
BLOB_DIGEST = "sha256:" + hashlib.sha256(BLOB).hexdigest()
UNAUTH = b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}'


class FakeRegistry:
    def __init__(self, mode="basic", user="alice", password="s3cret-pw", fail_first=0, send_digest=True, realm=None):
        self.mode, self.user, self.password = mode, user, password
        self.realm = realm  # the token service the Bearer challenge names (default: this server's /token)
        self.fail_first = fail_first
        self.send_digest = send_digest
        self.requests: list[tuple[str, str, dict]] = []
        self.token_requests: list[str] = []
        self.stored: dict[str, bytes] = {}  # blobs uploaded (put_blob), by the digest they hash to
        self.upload_location = "/v2/ml/pytorch/blobs/uploads/u-1?state=s"  # what POST …/uploads/ answers
        self.put_status: int | None = None  # the upload's PUT answered with this instead
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def _handler(self):
        reg = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body=b"", headers=None):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _authorized(self):
                got = self.headers.get("Authorization", "")
                if reg.mode == "none":
                    return True
                if reg.mode == "basic":
                    want = "Basic " + base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()
                    return got == want
                return got == "Bearer tok-123"

            def _challenge(self):
                if reg.mode == "basic":
                    return {"WWW-Authenticate": 'Basic realm="test"'}
                realm = reg.realm or f"http://{reg.address}/token"
                return {"WWW-Authenticate": f'Bearer realm="{realm}",service="fake-reg"'}

            def handle_one(self):
                reg.requests.append((self.command, self.path, dict(self.headers)))
                if self.path.startswith("/token"):
                    reg.token_requests.append(self.path)
                    want = "Basic " + base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()
                    if self.headers.get("Authorization") != want:
                        return self._send(401, b'{"details":"incorrect username or password"}')
                    return self._send(200, json.dumps({"token": "tok-123"}).encode())
                if reg.fail_first > 0:
                    reg.fail_first -= 1
                    return self._send(503, b'{"errors":[{"code":"UNAVAILABLE","message":"busy"}]}')
                if not self._authorized():
                    return self._send(401, UNAUTH, self._challenge())
                if self.path == "/v2/":
                    return self._send(200, b"{}")
                if self.command == "POST" and self.path == "/v2/ml/pytorch/blobs/uploads/":
                    return self._send(202, b"", {"Location": reg.upload_location})
                if self.command == "PUT" and self.path.startswith("/v2/ml/pytorch/blobs/uploads/u-1?"):
                    data = self.rfile.read(int(self.headers["Content-Length"]))
                    if reg.put_status:
                        return self._send(reg.put_status, b'{"errors":[{"code":"DIGEST_INVALID","message":"no"}]}')
                    digest = "sha256:" + hashlib.sha256(data).hexdigest()
                    if f"digest={digest}" not in self.path.replace("%3A", ":"):
                        return self._send(400, b'{"errors":[{"code":"DIGEST_INVALID","message":"digest"}]}')
                    reg.stored[digest] = data
                    return self._send(201, b"", {"Docker-Content-Digest": digest})
                if self.path == "/v2/ml/pytorch/manifests/2.9-cpu":
                    headers = {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"}
                    if reg.send_digest:
                        headers["Docker-Content-Digest"] = DIGEST
                    return self._send(200, MANIFEST, headers)
                if self.path == f"/v2/ml/pytorch/blobs/{BLOB_DIGEST}":
                    return self._send(200, BLOB, {"Content-Type": "application/octet-stream"})
                if self.path == "/v2/ml/pytorch/blobs/sha256:" + "0" * 64:  # serves bytes of another digest
                    return self._send(200, BLOB)
                return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')

            do_GET = do_HEAD = do_POST = do_PUT = handle_one

        return H

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def client(reg, user="alice", password="s3cret-pw", **kw):
    kw.setdefault("sleep", lambda s: None)
    return RegistryClient(RegistryAuth(reg.address, user, password), **kw)


def test_basic_auth_manifest_digest_and_accept_header():
    with FakeRegistry("basic") as reg:
        c = client(reg)
        c.check_auth("ml/pytorch")
        assert c.manifest_digest("ml/pytorch", "2.9-cpu") == DIGEST
        assert c.manifest_digest("ml/pytorch", "missing") is None
        heads = [r for r in reg.requests if r[0] == "HEAD"]
        for _m, _p, headers in heads:
            for media_type in MANIFEST_TYPES:
                assert media_type in headers["Accept"]
        assert heads[-1][2]["User-Agent"].startswith("imagebuild/")


def test_wrong_password_quotes_the_registry():
    with FakeRegistry("basic") as reg:
        with pytest.raises(RegistryAuthError) as err:
            client(reg, password="wrong-pw").check_auth("ml/pytorch")
        assert "unauthorized: authentication required" in str(err.value)
        assert "HTTP 401" in str(err.value)
        assert "wrong-pw" not in str(err.value)
        with_creds = [r for r in reg.requests if "Authorization" in r[2]]
        assert len(with_creds) == 1  # one try with the credentials: no retries


def test_no_credentials_for_a_protected_registry():
    with FakeRegistry("basic") as reg:
        c = RegistryClient(RegistryAuth(reg.address), sleep=lambda s: None)
        with pytest.raises(RegistryAuthError, match="no credentials"):
            c.manifest_digest("ml/pytorch", "2.9-cpu")


def test_bearer_token_flow_with_scope():
    with FakeRegistry("bearer") as reg:
        c = client(reg)
        c.check_auth("ml/pytorch")
        assert c.manifest_digest("ml/pytorch", "2.9-cpu") == DIGEST
        assert any("scope=repository%3Aml%2Fpytorch%3Apull%2Cpush" in t for t in reg.token_requests)
        assert any("scope=repository%3Aml%2Fpytorch%3Apull" in t and "push" not in t for t in reg.token_requests)
        assert all("service=fake-reg" in t and "account=alice" in t for t in reg.token_requests)
        n = len(reg.token_requests)
        c.manifest_digest("ml/pytorch", "2.9-cpu")
        assert len(reg.token_requests) == n  # token cached per scope


def test_bearer_token_endpoint_refusal():
    with FakeRegistry("bearer") as reg:
        with pytest.raises(RegistryAuthError, match="incorrect username or password"):
            client(reg, password="nope-nope").check_auth("ml/pytorch")


def test_503_retried_with_backoff():
    with FakeRegistry("none", fail_first=3) as reg:  # the scheme ping gets the first 503
        sleeps = []
        c = client(reg, sleep=sleeps.append, backoff=0.5)
        assert c.manifest_digest("ml/pytorch", "2.9-cpu") == DIGEST
        assert sleeps == [0.5, 1.0]


def test_503_gives_up():
    with FakeRegistry("none", fail_first=10) as reg:
        c = client(reg, retries=2)
        with pytest.raises(RegistryError) as err:
            c.manifest_digest("ml/pytorch", "2.9-cpu")
        assert err.value.transient and "HTTP 503" in str(err.value)  # HEAD answers carry no body


def test_digest_computed_when_header_missing():
    with FakeRegistry("none", send_digest=False) as reg:
        assert client(reg).manifest_digest("ml/pytorch", "2.9-cpu") == DIGEST


def test_connection_refused_is_transient():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = RegistryClient(RegistryAuth(f"127.0.0.1:{port}"), retries=1, sleep=lambda s: None, timeout=2)
    with pytest.raises(RegistryError) as err:
        c.manifest_digest("a/b", "c")
    assert err.value.transient


def test_registry_message():
    assert registry_message(UNAUTH) == "unauthorized: authentication required"
    assert registry_message(b'{"details":"bad creds"}') == "bad creds"
    assert registry_message(b"", "fallback") == "fallback"
    assert registry_message(b"plain text") == "plain text"


@pytest.mark.parametrize("mode", ["basic", "bearer"])
def test_manifest_blob_and_streamed_blob(mode):
    """What `diff`/`sbom` of a registry image use: the manifest with its media type and digest, a small blob checked
    against its digest, a blob as a stream (authorized with the same cached credentials)."""
    with FakeRegistry(mode) as reg:
        c = client(reg)
        body, media, digest = c.manifest_raw("ml/pytorch", "2.9-cpu")
        assert (body, media, digest) == (MANIFEST, "application/vnd.docker.distribution.manifest.v2+json", DIGEST)
        assert c.blob("ml/pytorch", BLOB_DIGEST) == BLOB
        stream = c.open_blob("ml/pytorch", BLOB_DIGEST)
        try:
            assert stream.read() == BLOB
        finally:
            stream.close()
        with pytest.raises(RegistryError, match="has digest"):
            c.blob("ml/pytorch", "sha256:" + "0" * 64)
        with pytest.raises(RegistryError) as missing:
            c.open_blob("ml/pytorch", "sha256:" + "1" * 64)
        assert missing.value.status == 404
        with pytest.raises(RegistryError) as gone:
            c.manifest_raw("ml/pytorch", "missing")
        assert gone.value.status == 404
        if mode == "bearer":
            assert len(reg.token_requests) == 1  # one token for the repository's pull scope, reused


@pytest.mark.parametrize("realm_of", [lambda collector: f"http://{collector.address}/token",
                                      lambda collector: f"http://localhost:{collector.port}/token",
                                      lambda collector: "file:///etc/passwd"])
def test_credentials_never_go_to_another_host_over_http(realm_of):
    """A registry naming a token service on another host over plain http (a fake collector) gets no Basic password."""
    with FakeRegistry("none") as collector, FakeRegistry("bearer") as reg:
        reg.realm = realm_of(collector)
        with pytest.raises(RegistryAuthError, match="not sending credentials") as err:
            client(reg).check_auth("ml/pytorch")
        assert "s3cret-pw" not in str(err.value)
        assert collector.requests == []
        assert not any("Authorization" in h for _m, path, h in reg.requests if path.startswith("/token"))


def test_anonymous_token_from_another_http_host_is_allowed():
    """No credentials, nothing to leak: an anonymous pull token may come from anywhere http(s)."""
    with FakeRegistry("bearer") as tokens, FakeRegistry("bearer") as reg:
        reg.realm = f"http://{tokens.address}/token"
        c = RegistryClient(RegistryAuth(reg.address), sleep=lambda s: None)
        with pytest.raises(RegistryAuthError, match="incorrect username or password"):
            c.check_auth("ml/pytorch")  # the fake token service wants credentials; what matters: it was asked
        assert tokens.token_requests and not any("Authorization" in h for _m, _p, h in tokens.requests)


@pytest.mark.parametrize("mode", ["basic", "bearer"])
def test_a_blob_is_put_from_its_file_in_one_streamed_request(mode, tmp_path):
    """put_blob (push/upload.py): an upload session, then the file's bytes in one PUT with the digest, authorized
    with the registry's cached credentials; a Location with a query of its own keeps it."""
    blob = tmp_path / "blob"
    blob.write_bytes(BLOB)
    with FakeRegistry(mode) as reg:
        c = client(reg)
        c.put_blob("ml/pytorch", BLOB_DIGEST, blob, len(BLOB))
        assert reg.stored == {BLOB_DIGEST: BLOB}
        put = next((path, headers) for method, path, headers in reg.requests if method == "PUT")
        assert put[0].startswith("/v2/ml/pytorch/blobs/uploads/u-1?state=s&digest=sha256")
        assert put[1]["Authorization"] == ("Bearer tok-123" if mode == "bearer" else client_basic())


def client_basic():
    return "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()


def test_an_upload_location_on_another_host_gets_no_credentials(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(BLOB)
    with FakeRegistry("basic") as reg, FakeRegistry("none") as storage:
        reg.upload_location = f"http://{storage.address}/v2/ml/pytorch/blobs/uploads/u-1?state=s"
        client(reg).put_blob("ml/pytorch", BLOB_DIGEST, blob, len(BLOB))
        assert storage.stored == {BLOB_DIGEST: BLOB} and reg.stored == {}
        assert all("Authorization" not in headers for _, _, headers in storage.requests)


@pytest.mark.parametrize(("status", "transient"), [(503, True), (429, True), (400, False), (404, False)])
def test_a_refused_upload_says_whether_it_is_worth_another_attempt(status, transient, tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(BLOB)
    with FakeRegistry("none") as reg:
        reg.put_status = status
        with pytest.raises(RegistryError) as refused:
            client(reg).put_blob("ml/pytorch", BLOB_DIGEST, blob, len(BLOB))
        assert refused.value.status == status and refused.value.transient is transient
        assert "PUT blob " + BLOB_DIGEST in str(refused.value) and reg.stored == {}


def test_bytes_other_than_the_digest_are_refused_by_the_registry(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(BLOB + b"!")
    with FakeRegistry("none") as reg:
        with pytest.raises(RegistryError, match="HTTP 400"):
            client(reg).put_blob("ml/pytorch", BLOB_DIGEST, blob, len(BLOB) + 1)
        assert reg.stored == {}


def test_a_lost_connection_during_the_upload_is_transient(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(BLOB)
    with FakeRegistry("none") as reg:
        reg.upload_location = "http://127.0.0.1:1/v2/ml/pytorch/blobs/uploads/u-1"  # nothing listens there
        with pytest.raises(RegistryError) as lost:
            client(reg).put_blob("ml/pytorch", BLOB_DIGEST, blob, len(BLOB))
        assert lost.value.transient


def test_a_blob_is_put_over_tls_through_the_clients_own_trust(tmp_path):
    """The https branch of put_blob (TLS: the bytes go through Python a MiB at a time): a registry whose certificate
    only the given CA file vouches for takes the blob; without that CA the upload is refused as a TLS error."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make the test registry's certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    blob = tmp_path / "blob"
    blob.write_bytes(BLOB * 300)  # 3.6 MB: several blocks
    digest = "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest()
    with FakeRegistry("basic") as reg:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        reg.server.socket = context.wrap_socket(reg.server.socket, server_side=True)
        client(reg, scheme="https", ca_file=str(cert)).put_blob("ml/pytorch", digest, blob, blob.stat().st_size)
        assert reg.stored == {digest: blob.read_bytes()}
        with pytest.raises(RegistryError, match="TLS"):
            client(reg, scheme="https").put_blob("ml/pytorch", digest, blob, blob.stat().st_size)
