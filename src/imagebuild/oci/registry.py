"""A small Distribution v2 (OCI distribution) HTTP client: what push and `diff`/`sbom` of registry images need.

`repository` arguments are paths inside the registry (`Reference.repository`: `ml/pytorch`, `library/ubuntu`).

- `check_auth(repo)`: do the credentials work? (the registry's own 401/403 message when not)
- `manifest_digest(repo, tag)`: `HEAD /v2/<repo>/manifests/<tag>` with every manifest media type in Accept, so the
  registry answers with the digest of the manifest as pushed (a registry that gets no matching Accept may convert
  schema2 to schema1 and report another digest); falls back to GET + sha256 when `Docker-Content-Digest` is absent.
- `manifest(repo, ref)`, `blob(repo, digest)`, `open_blob(repo, digest)`: read an image without an engine.

Auth: anonymous, Basic, or Bearer (token endpoint from `WWW-Authenticate`, with Basic credentials or an identity
token as OAuth refresh token). Transport: https; for loopback registries (127.0.0.0/8, localhost, ::1) plain http
first, as Docker 20.10+ allows them insecure, falling over to https when the port speaks TLS. CA: `ca_file`, else
/etc/docker/certs.d/<host>/ca.crt (the file the engine itself uses), else the system store.
Transient failures (5xx, 429, connection reset/refused, timeouts) are retried by the one policy (imagebuild.retry).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from email.message import Message
from pathlib import Path
from typing import IO

from imagebuild import __version__
from imagebuild.errors import ImagebuildError
from imagebuild.hints import ca_hint, credentials_hint
from imagebuild.oci.auth import RegistryAuth, credentials_refused
from imagebuild.oci.reference import DOCKER_HUB
from imagebuild.retry import REGISTRY, RetryPolicy
from imagebuild.secrets import redact

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)
USER_AGENT = f"imagebuild/{__version__}"
CERTS_D = Path("/etc/docker/certs.d")
HUB_API_HOST = "registry-1.docker.io"  # where Docker Hub's v2 API answers
# the distribution spec's manifest limit (registries refuse larger ones); every other answer read into memory
# (errors, tokens, pings) is bounded by the same figure, so a hostile server costs at most this much per request
MAX_MANIFEST_BYTES = 4 << 20
MAX_ANSWER_BYTES = MAX_MANIFEST_BYTES
_SEND_BLOCK = 1 << 20  # a blob's bytes sent over TLS a MiB at a time


class RegistryError(ImagebuildError):
    """The registry could not be asked (after retries), or answered something unusable."""

    def __init__(self, message: str, status: int | None = None, transient: bool = False):
        super().__init__(redact(message))
        self.status = status
        self.transient = transient


class RegistryAuthError(RegistryError):
    """401/403: credentials rejected or missing. Never retried; the message quotes the registry."""


def _loopback(host: str) -> bool:
    h = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:].split("]")[0]
    return h == "localhost" or h.startswith("127.") or h == "::1"


def registry_message(body: bytes, fallback: str = "") -> str:
    """`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}` -> `UNAUTHORIZED: authentication
    required` (the registry's own words, as users see them in `docker push`)."""
    try:
        doc = json.loads(body.decode("utf-8", "replace"))
        errors = doc.get("errors") or []
        parts = []
        for e in errors:
            code, msg = e.get("code", ""), e.get("message", "")
            parts.append(f"{code.lower() if code else ''}: {msg}".strip(": ") if msg or code else "")
        text = "; ".join(p for p in parts if p)
        if text:
            return text
        details = doc.get("details")
        if isinstance(details, str):
            return details
    except (ValueError, AttributeError):
        pass
    text = body.decode("utf-8", "replace").strip()
    return text[:300] if text else fallback


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


class _Response:
    def __init__(self, status: int, headers: Message, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class _TooLarge(Exception):
    """An answer larger than the caller's limit (a manifest over 4 MiB, a config over its bound): refused unread."""

    def __init__(self, declared: int | None, limit: int) -> None:
        said = f" ({declared} bytes declared)" if declared is not None else ""
        super().__init__(f"the answer is larger than {limit} bytes{said}; refused (not a manifest or config a "
                         "registry serves)")


class _ServerError(Exception):
    """A 5xx answer of the token endpoint, raised to be retried."""

    def __init__(self, response: _Response) -> None:
        super().__init__(f"HTTP {response.status}")
        self.response = response


class RegistryClient:
    def __init__(
        self,
        auth: RegistryAuth,
        *,
        scheme: str | None = None,
        ca_file: str | None = None,
        insecure: bool = False,
        timeout: float = 60.0,
        retries: int = REGISTRY.retries,
        backoff: float = REGISTRY.backoff,
        max_backoff: float = REGISTRY.max_backoff,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.auth = auth
        self.registry = auth.registry
        self.host = HUB_API_HOST if self.registry == DOCKER_HUB else self.registry
        self._scheme = scheme
        self.insecure = insecure
        self.timeout = timeout
        self.policy = RetryPolicy(retries, backoff, max_backoff)
        self.sleep = sleep
        self.log: Callable[[str], None] = log or (lambda _m: None)
        self._tokens: dict[str, str] = {}  # scope -> Authorization header value
        self._basic_ok = False
        ca = ca_file
        if ca is None and (CERTS_D / self.registry / "ca.crt").is_file():
            ca = str(CERTS_D / self.registry / "ca.crt")
        self._ssl = ssl.create_default_context(cafile=ca)
        if insecure:
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE

    # -- public --------------------------------------------------------------------------------------------------
    def check_auth(self, repository: str, actions: str = "pull,push") -> None:
        """Raise RegistryAuthError quoting the registry when the credentials are refused (or needed and absent)."""
        self._request("GET", "/v2/", scope=f"repository:{repository}:{actions}")

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """Digest the registry serves for `repository:reference`, or None when the tag does not exist."""
        path = f"/v2/{repository}/manifests/{urllib.parse.quote(reference, safe=':@')}"
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        scope = f"repository:{repository}:pull"
        r = self._request("HEAD", path, headers=headers, scope=scope, ok=(200, 404))
        if r.status == 404:
            return None
        digest = r.headers.get("Docker-Content-Digest")
        if digest:
            return digest
        r = self._request("GET", path, headers=headers, scope=scope, ok=(200, 404), limit=MAX_MANIFEST_BYTES)
        if r.status == 404:
            return None
        return "sha256:" + hashlib.sha256(r.body).hexdigest()

    def blob_exists(self, repository: str, digest: str) -> bool:
        """Does `repository` hold blob `digest`? (`HEAD`: what a push asks before sending a layer.)"""
        r = self._request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=f"repository:{repository}:pull",
                          ok=(200, 404))
        return r.status == 200

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, object]] | None:
        """(digest, parsed manifest) for `repository:reference` (tag or digest), None when absent. The digest is the
        sha256 of the bytes served (checked against the one asked for, when a digest was asked for)."""
        path = f"/v2/{repository}/manifests/{urllib.parse.quote(reference, safe=':@')}"
        r = self._request("GET", path, headers={"Accept": ", ".join(MANIFEST_TYPES)},
                          scope=f"repository:{repository}:pull", ok=(200, 404), limit=MAX_MANIFEST_BYTES)
        if r.status == 404:
            return None
        digest = "sha256:" + hashlib.sha256(r.body).hexdigest()
        if reference.startswith("sha256:") and reference != digest:
            raise RegistryError(f"{self.registry}: manifest {reference} of {repository} has digest {digest}")
        try:
            doc = json.loads(r.body)
        except ValueError as exc:
            raise RegistryError(f"{self.registry}: manifest of {repository}:{reference} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise RegistryError(f"{self.registry}: manifest of {repository}:{reference} is not a JSON object")
        return digest, doc

    def blob(self, repository: str, digest: str, max_bytes: int = 16 << 20) -> bytes:
        """A (small) blob such as an image config, verified against its digest."""
        r = self._request("GET", f"/v2/{repository}/blobs/{digest}", scope=f"repository:{repository}:pull",
                          ok=(200,), limit=max_bytes)
        got = "sha256:" + hashlib.sha256(r.body).hexdigest()
        if got != digest:
            raise RegistryError(f"{self.registry}: blob {digest} of {repository} has digest {got}")
        return r.body

    def manifest_raw(self, repository: str, reference: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of the manifest or index `repository:reference` (a tag or a digest);
        RegistryError with status 404 when there is none. A digest reference is checked against the body."""
        path = f"/v2/{repository}/manifests/{urllib.parse.quote(reference, safe=':@')}"
        r = self._request("GET", path, headers={"Accept": ", ".join(MANIFEST_TYPES)},
                          scope=f"repository:{repository}:pull", limit=MAX_MANIFEST_BYTES)
        digest = "sha256:" + hashlib.sha256(r.body).hexdigest()
        if reference.startswith("sha256:") and reference != digest:
            raise RegistryError(f"{self.registry}: manifest {repository}@{reference} has digest {digest}")
        media = (r.headers.get("Content-Type") or "").split(";", 1)[0].strip()
        return r.body, media, digest

    def open_blob(self, repository: str, digest: str) -> IO[bytes]:
        """A blob as a stream (layers can be GBs: never held in memory). The caller reads and closes it; the bytes
        are not checked here (hash them while reading)."""
        path = f"/v2/{repository}/blobs/{digest}"
        scope = f"repository:{repository}:pull"
        self._request("HEAD", path, scope=scope)  # authorizes (token cached per scope) and 404s early
        headers = {"User-Agent": USER_AGENT}
        cached = self._tokens.get(scope) or (self._basic_header() if self._basic_ok else None)
        if cached:
            headers["Authorization"] = cached
        req = urllib.request.Request(f"{self._scheme}://{self.host}{path}", headers=headers)
        opener = urllib.request.build_opener(_NoRedirectAuthStrip(), urllib.request.HTTPSHandler(context=self._ssl))
        try:
            resp: IO[bytes] = opener.open(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise RegistryError(f"{self.registry}: GET {path}: HTTP {exc.code}", status=exc.code) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise RegistryError(f"{self.registry}: GET {path}: {getattr(exc, 'reason', exc)}",
                                transient=True) from exc
        return resp

    def put_manifest(self, repository: str, reference: str, body: bytes, media_type: str) -> None:
        """Point `repository:reference` at the manifest `body` (its blobs must be in the repository already): how a
        tag is pointed at the digest push wrote (and signed) by digest."""
        path = f"/v2/{repository}/manifests/{urllib.parse.quote(reference, safe=':@')}"
        self._request("PUT", path, headers={"Content-Type": media_type}, scope=f"repository:{repository}:pull,push",
                      ok=(200, 201, 202), data=body)

    def put_blob(self, repository: str, digest: str, path: Path, size: int) -> None:
        """The file `path` (`size` bytes; the caller hashed it to `digest`) as blob `digest` of `repository`: an
        upload session, then the whole file in one PUT (the distribution spec's monolithic upload, which every
        registry takes), streamed (plain http: sendfile, no copy through Python). The registry checks the digest
        itself. RegistryAuthError when refused; RegistryError (transient on 5xx, 429 and a lost connection, for the
        caller's one retry policy: the PUT is not retried here) otherwise."""
        scope = f"repository:{repository}:pull,push"
        start = f"/v2/{repository}/blobs/uploads/"
        r = self._request("POST", start, scope=scope, ok=(202,), data=b"")
        location = r.headers.get("Location") or ""
        if not location:
            raise RegistryError(f"{self.registry}: POST {start}: no Location to upload {digest} to")
        base = f"{self._scheme}://{self.host}/"
        url = urllib.parse.urlsplit(urllib.parse.urljoin(base, location))
        here = urllib.parse.urlsplit(base)
        if url.scheme not in ("http", "https"):
            raise RegistryError(f"{self.registry}: POST {start}: an upload location that is no HTTP URL")
        query = "&".join(q for q in (url.query, "digest=" + urllib.parse.quote(digest, safe=":")) if q)
        headers = {"User-Agent": USER_AGENT, "Content-Type": "application/octet-stream", "Content-Length": str(size)}
        cached = self._tokens.get(scope) or (self._basic_header() if self._basic_ok else None)
        if cached and _may_carry_auth(here, url):
            headers["Authorization"] = cached
        r = self._put_file(url, query, headers, path)
        where = f"{self.registry}: PUT blob {digest}"
        if r.status in (401, 403):
            raise RegistryAuthError(self._auth_text(r), status=r.status)
        if r.status != 201:
            raise RegistryError(f"{where}: HTTP {r.status}: {registry_message(r.body, 'no detail')}", status=r.status,
                                transient=r.status >= 500 or r.status == 429)
        served = r.headers.get("Docker-Content-Digest")
        if served and served != digest:
            raise RegistryError(f"{where}: the registry stored it as {served}")

    def _put_file(self, url: urllib.parse.SplitResult, query: str, headers: dict[str, str], path: Path) -> _Response:
        """One PUT of the file's bytes; the answer's body read up to MAX_ANSWER_BYTES."""
        conn: http.client.HTTPConnection
        if url.scheme == "https":
            conn = http.client.HTTPSConnection(url.netloc, timeout=self.timeout, context=self._ssl,
                                               blocksize=_SEND_BLOCK)
        else:
            conn = http.client.HTTPConnection(url.netloc, timeout=self.timeout, blocksize=_SEND_BLOCK)
        try:
            conn.putrequest("PUT", f"{url.path}?{query}", skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            with path.open("rb") as fh:
                if url.scheme == "https":
                    conn.send(fh)  # TLS: through Python, a block at a time
                else:
                    conn.sock.sendfile(fh)
            resp = conn.getresponse()
            return _Response(resp.status, resp.headers, resp.read(MAX_ANSWER_BYTES))
        except ssl.SSLCertVerificationError as exc:
            raise self._tls_refused(exc) from None
        except (OSError, http.client.HTTPException) as exc:  # resets, timeouts, a closed connection
            raise RegistryError(f"{self.registry}: PUT {url.path}: {exc or type(exc).__name__}",
                                transient=True) from None
        finally:
            conn.close()

    def scheme(self) -> str:
        """http or https, as discovered with the `GET /v2/` ping (cosign needs --allow-http-registry for http)."""
        self._discover()
        return self._scheme or "https"

    # -- transport -----------------------------------------------------------------------------------------------
    def _schemes(self) -> list[str]:
        if self._scheme:
            return [self._scheme]
        if _loopback(self.registry):
            return ["http", "https"]
        return ["https", "http"] if self.insecure else ["https"]

    def _raw(self, method: str, url: str, headers: dict[str, str], data: bytes | None = None,
             limit: int = MAX_ANSWER_BYTES) -> _Response:
        """One HTTP exchange; the body is read only up to `limit` bytes (TooLarge past it: never read whole)."""
        req = urllib.request.Request(url, data=data, method=method, headers={"User-Agent": USER_AGENT, **headers})
        opener = urllib.request.build_opener(_NoRedirectAuthStrip(), urllib.request.HTTPSHandler(context=self._ssl))
        try:
            with opener.open(req, timeout=self.timeout) as resp:
                declared = resp.headers.get("Content-Length") or ""  # a HEAD's: the size of what it asks about
                if method != "HEAD" and declared.isdigit() and int(declared) > limit:
                    raise _TooLarge(int(declared), limit)
                body = resp.read(limit + 1)
                if len(body) > limit:
                    raise _TooLarge(None, limit)
                return _Response(resp.status, resp.headers, body)
        except urllib.error.HTTPError as exc:
            body = exc.read(MAX_ANSWER_BYTES) if exc.fp else b""  # an error page: its start is enough
            return _Response(exc.code, exc.headers, body)
        except _TooLarge as exc:
            raise RegistryError(f"{self.registry}: {method} {urllib.parse.urlsplit(url).path}: {exc}") from None

    def _send(self, method: str, path: str, headers: dict[str, str], data: bytes | None = None,
              limit: int = MAX_ANSWER_BYTES) -> _Response:
        """One request with scheme discovery and transient-failure retries."""
        return self.policy.call(lambda: self._send_once(method, path, headers, data, limit),
                                retryable=lambda exc: isinstance(exc, RegistryError) and exc.transient,
                                sleep=self.sleep,
                                on_retry=lambda exc, n, wait: self.log(f"{exc}; retry {n}/{self.policy.retries} in "
                                                                       f"{wait:.1f}s"))

    def _discover(self) -> None:
        """Pick http or https with a `GET /v2/` ping (as the engine does); only when not given or known yet."""
        if self._scheme:
            return
        schemes = self._schemes()
        last: Exception | None = None
        for scheme in schemes:
            try:
                r = self._raw("GET", f"{scheme}://{self.host}/v2/", {})
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # TLS errors, resets
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, ssl.SSLCertVerificationError):
                    raise self._tls_refused(reason) from exc
                last = exc
                continue
            if r.status == 400 and b"HTTPS server" in r.body:
                continue  # a TLS port asked in plain HTTP
            self._scheme = scheme
            return
        raise RegistryError(f"{self.registry}: GET /v2/: {getattr(last, 'reason', last)}", transient=True)

    def _send_once(self, method: str, path: str, headers: dict[str, str], data: bytes | None = None,
                   limit: int = MAX_ANSWER_BYTES) -> _Response:
        self._discover()
        url = f"{self._scheme}://{self.host}{path}"
        try:
            r = self._raw(method, url, headers, data, limit=limit)
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # SSLError, timeouts: OSError
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise self._tls_refused(reason) from exc
            raise RegistryError(f"{self.registry}: {method} {path}: {reason}", transient=True) from exc
        if r.status >= 500 or r.status == 429:
            raise RegistryError(
                f"{self.registry}: {method} {path}: HTTP {r.status}: {registry_message(r.body, 'no detail')}",
                status=r.status, transient=True,
            )
        return r

    def _request(self, method: str, path: str, headers: dict[str, str] | None = None, scope: str = "",
                 ok: tuple[int, ...] = (200,), data: bytes | None = None,
                 limit: int = MAX_ANSWER_BYTES) -> _Response:
        headers = dict(headers or {})
        cached = self._tokens.get(scope) or (self._basic_header() if self._basic_ok else None)
        if cached:
            headers["Authorization"] = cached
        r = self._send(method, path, headers, data, limit)
        if r.status == 401:
            challenge = r.headers.get("WWW-Authenticate", "")
            value = self._authorize(challenge, scope, r)
            headers["Authorization"] = value
            r = self._send(method, path, headers, data, limit)
            if r.status in (401, 403):
                self._tokens.pop(scope, None)
                raise RegistryAuthError(self._auth_text(r), status=r.status)
        if r.status == 403:
            raise RegistryAuthError(self._auth_text(r), status=403)
        if r.status not in ok:
            raise RegistryError(
                f"{self.registry}: {method} {path}: HTTP {r.status}: {registry_message(r.body, 'no detail')}",
                status=r.status,
            )
        return r

    def _tls_refused(self, exc: ssl.SSLCertVerificationError) -> RegistryError:
        """The one line for a certificate this machine does not trust, naming how to give the registry's CA."""
        return RegistryError(f"{self.registry}: TLS: {exc.verify_message}; give the registry's CA with "
                             f"{ca_hint(self.registry)}")

    def _auth_text(self, r: _Response) -> str:
        fallback = "authentication required" if r.status == 401 else "access denied"
        return f"{self.registry}: {registry_message(r.body, fallback)} (HTTP {r.status}, {self.auth.describe()})"

    def _basic_header(self) -> str:
        raw = f"{self.auth.username or ''}:{self.auth.password or ''}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    def _authorize(self, challenge: str, scope: str, first: _Response) -> str:
        kind, params = _parse_challenge(challenge)
        if kind == "basic":
            if self.auth.anonymous:
                raise RegistryAuthError(f"{self._auth_text(first)}; no credentials found for {self.registry} "
                                        f"({credentials_hint()})", status=401)
            self._basic_ok = True
            return self._basic_header()
        if kind == "bearer":
            token = self._fetch_token(params, scope)
            value = f"Bearer {token}"
            self._tokens[scope] = value
            return value
        raise RegistryAuthError(f"{self._auth_text(first)}; unsupported challenge {challenge!r}", status=401)

    def _fetch_token(self, params: dict[str, str], scope: str) -> str:
        realm = params.get("realm")
        if not realm:
            raise RegistryError(f"{self.registry}: bearer challenge without realm")
        refused = credentials_refused(f"{self._scheme}://{self.host}", realm)
        if refused and (not self.auth.anonymous or urllib.parse.urlsplit(realm).scheme not in ("http", "https")):
            raise RegistryAuthError(f"{self.registry}: not sending credentials: {refused}", status=401)
        query = {"service": params.get("service", "")}
        if scope or params.get("scope"):
            query["scope"] = scope or params["scope"]
        headers: dict[str, str] = {}
        if self.auth.identity_token:
            form = urllib.parse.urlencode({**query, "grant_type": "refresh_token", "client_id": "imagebuild",
                                           "refresh_token": self.auth.identity_token}).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            method, url, data = "POST", realm, form
        else:
            if self.auth.username:
                query["account"] = self.auth.username
            if not self.auth.anonymous:
                headers["Authorization"] = self._basic_header()
            method, url, data = "GET", f"{realm}?{urllib.parse.urlencode(query)}", None
        def attempt() -> _Response:
            try:
                got = self._raw(method, url, headers, data)
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                raise RegistryError(f"{self.registry}: token endpoint {realm}: {exc}", transient=True) from exc
            if got.status >= 500:
                raise _ServerError(got)
            return got

        try:
            r = self.policy.call(attempt, retryable=lambda exc: isinstance(exc, (RegistryError, _ServerError)),
                                 sleep=self.sleep)
        except _ServerError as exc:  # still 5xx after the retries: reported below like any other status
            r = exc.response
        if r.status in (401, 403):
            raise RegistryAuthError(
                f"{self.registry}: {registry_message(r.body, 'authentication failed')} (token endpoint "
                f"{realm}: HTTP {r.status}, {self.auth.describe()})", status=r.status)
        if r.status != 200:
            raise RegistryError(f"{self.registry}: token endpoint {realm}: HTTP {r.status}", status=r.status)
        try:
            doc = json.loads(r.body)
        except ValueError as exc:
            raise RegistryError(f"{self.registry}: token endpoint {realm}: not JSON") from exc
        token = doc.get("token") or doc.get("access_token")
        if not token:
            raise RegistryError(f"{self.registry}: token endpoint {realm}: no token in answer")
        token = str(token)
        from imagebuild.secrets import register_secret

        register_secret(token)
        return token


def _may_carry_auth(here: urllib.parse.SplitResult, there: urllib.parse.SplitResult) -> bool:
    """May a request to `there` carry the credentials meant for `here`? The same host only, and never down from
    https to http."""
    return here.netloc == there.netloc and (here.scheme, there.scheme) != ("https", "http")


class _NoRedirectAuthStrip(urllib.request.HTTPRedirectHandler):
    """Follow redirects (blob/manifest storage backends) but never carry Authorization to another host, nor from
    https down to http."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not _may_carry_auth(urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)):
            new.headers.pop("Authorization", None)
            new.unredirected_hdrs.pop("Authorization", None)
        return new
