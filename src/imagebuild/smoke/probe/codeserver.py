"""code-server (VS Code's server, where the dev image has it) on a loopback port: it answers with its password and
sends a request without it to its login page; its `--version` line read."""

from __future__ import annotations

import os
import tempfile
import time
import urllib.request

from probe.common import free_port
from probe.services import LoopbackServer

CODE_SERVER_PIN = "/etc/imagebuild/code-server.json"  # the image's pin (render/image.py writes it at build time)
CODE_SERVER_DEFAULT = "/opt/code-server/bin/code-server"


def code_server_version(text):
    """`code-server --version` -> its version: '4.139.1 6f5b2c1 with Code 1.107.0' -> '4.139.1' (None: no version)."""
    for line in (text or "").splitlines():
        word = line.strip().split(" ", 1)[0]
        if word[:1].isdigit() and "." in word:
            return word
    return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a 302 is an answer to look at, not to follow
        return None


class CodeServer(LoopbackServer):
    """Start code-server on a free loopback port with a random password (never --auth none); check that it answers,
    sends a request without the password's session cookie to its login page, and serves `/` after a login."""

    def __init__(self, exe):
        super().__init__()
        self.exe = exe
        self.password: str | None = None
        self.folder = ""

    def start(self):
        import secrets

        self.port, self.password = free_port(), secrets.token_urlsafe(18)
        self.root = tempfile.mkdtemp(prefix="ibprobe-cs-")
        self.log = tempfile.TemporaryFile(mode="w+")
        work = self.folder = os.path.join(self.root, "workspace")
        os.makedirs(work)
        cmd = [self.exe, "--bind-addr", f"127.0.0.1:{self.port}", "--auth", "password", "--disable-telemetry",
               "--disable-update-check", "--user-data-dir", os.path.join(self.root, "data"),
               "--extensions-dir", os.path.join(self.root, "extensions"), work]
        env = dict(os.environ, PASSWORD=self.password, HOME=self.root)
        env.pop("HASHED_PASSWORD", None)
        self._spawn("code-server", cmd, env)

    def _request(self, path, data=None, cookie=None):
        """(status, headers) of one request to the server, redirects not followed, no proxy."""
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data)
        if cookie:
            req.add_header("Cookie", cookie)
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
        try:
            with opener.open(req, timeout=10) as r:
                return r.status, r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.headers

    def check(self, timeout=60):
        if self.error:
            return {"status": "failed", "reason": self.error}
        end = time.time() + timeout
        health = None
        while time.time() < end:
            if self.proc.poll() is not None:
                return {"status": "failed", "reason": f"code-server exited {self.proc.returncode}: {self._tail()}"}
            try:
                health = self._request("/healthz")[0]
                break
            except OSError:
                time.sleep(0.3)
        if health is None:
            return {"status": "failed", "reason": f"code-server did not answer within {timeout:.0f} s: {self._tail()}"}
        startup = round(time.time() - self.t0, 2)
        from urllib.parse import quote, urlencode

        page = "/?folder=" + quote(self.folder)  # `/` alone redirects to the last folder opened, once logged in
        try:
            without, headers = self._request(page)
            to = (headers or {}).get("Location", "") if headers is not None else ""
            login, login_headers = self._request("/login", data=urlencode({"password": self.password}).encode())
            cookies = login_headers.get_all("Set-Cookie") if login_headers is not None else None
            cookie = "; ".join(c.split(";", 1)[0] for c in cookies or [])
            wrong, wrong_headers = self._request("/login", data=urlencode({"password": f"not-{self.password}"})
                                                 .encode())
            wrong_cookie = bool(wrong_headers.get_all("Set-Cookie")) if wrong_headers is not None else False
            with_password = self._request(page, cookie=cookie)[0] if cookie else None
        except OSError as exc:
            return {"status": "failed", "reason": f"HTTP error: {exc}"}
        fig = {"port": self.port, "healthz": health, "without_password": without, "redirect": to,
               "login": login, "with_password": with_password, "wrong_password_cookie": wrong_cookie,
               "startup_seconds": startup}
        refused = without in (401, 403) or (without in (302, 303) and "login" in to)
        if with_password == 200 and refused and not wrong_cookie:
            return {"status": "passed", "reason": f"HTTP {with_password} after a login with the password, {without} "
                    "to the login page without it", "figures": fig}
        return {"status": "failed", "reason": f"with the password {with_password} (want 200), without it {without} "
                f"{to!r} (want a redirect to the login page, or 401/403), a wrong password "
                f"{'given' if wrong_cookie else 'refused'} a session", "figures": fig}

