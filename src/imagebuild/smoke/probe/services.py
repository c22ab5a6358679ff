"""dev flavor services: JupyterLab on a loopback port answers with its token and refuses without it; sshd's config
passes `sshd -t` (with a throwaway host key when the real ones are unreadable) and has PasswordAuthentication no
(code-server, VS Code's server, has its own module: codeserver.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from probe.common import CHILDREN, free_port, listdir, rmtree, stop_process, which


def parse_sshd_T(text: str) -> dict:
    """`sshd -T` (effective config, lowercase keys) -> {key: value}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            out.setdefault(parts[0].lower(), parts[1] if len(parts) > 1 else "")
    return out


def parse_sshd_config_files(texts) -> dict:
    """First value wins across sshd_config (+ Include'd) text, Match blocks ignored: a fallback when `sshd -T` fails."""
    out: dict[str, str] = {}
    for text in texts:
        in_match = False
        for line in text.splitlines():
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            parts = s.split(None, 1)
            key = parts[0].lower()
            if key == "match":
                in_match = True
                continue
            if in_match:
                continue
            out.setdefault(key, parts[1].strip().strip('"') if len(parts) > 1 else "")
    return out


class LoopbackServer:
    """A server the probe starts on a loopback port in a session of its own (JupyterLab here, code-server in
    codeserver.py): its output in a temporary file, the last lines of which a failure quotes; stopped with its
    session, its temporary folder removed."""

    def __init__(self):
        self.proc: Any = None  # the Popen handle once started
        self.port: int | None = None
        self.error: str | None = None
        self.t0 = 0.0
        self.log: Any = None
        self.root: str | None = None

    def _spawn(self, what, cmd, env):
        """Start `cmd` (its output into self.log); a failure to start is self.error, naming `what`."""
        self.t0 = time.time()
        try:
            self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
            CHILDREN.append(self.proc)
        except OSError as exc:
            self.error = f"cannot start {what}: {exc}"

    def _tail(self):
        if not self.log:
            return ""
        self.log.seek(0)
        return " | ".join(ln.strip() for ln in self.log.read().splitlines()[-3:])[-800:]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(timeout=5)
            except (OSError, subprocess.SubprocessError):
                stop_process((self.proc,))
        if self.root:
            rmtree(self.root)


class Jupyter(LoopbackServer):
    """Start JupyterLab on a free loopback port with a random token; check HTTP with and without the token."""

    def __init__(self):
        super().__init__()
        self.token: str | None = None

    def start(self):
        exe = which("jupyter") or (os.path.join(os.path.dirname(sys.executable), "jupyter")
                                    if os.path.exists(os.path.join(os.path.dirname(sys.executable), "jupyter"))
                                    else None)
        if not exe:
            self.error = "jupyter not found in PATH"
            return
        import secrets

        self.port, self.token = free_port(), secrets.token_hex(16)
        self.root = tempfile.mkdtemp(prefix="ibprobe-jl-")
        self.log = tempfile.TemporaryFile(mode="w+")
        cmd = [exe, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.token={self.token}",
               f"--ServerApp.root_dir={self.root}"]
        if os.getuid() == 0:
            cmd.append("--allow-root")
        env = dict(os.environ, HOME=self.root if not os.access(os.path.expanduser("~"), os.W_OK)
                   else os.path.expanduser("~"), JUPYTER_RUNTIME_DIR=os.path.join(self.root, "rt"))
        env.pop("JUPYTER_TOKEN", None)  # the image's own token must not override the probe's
        self._spawn("jupyter", cmd, env)

    def _get(self, path, token):
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token:
            req.add_header("Authorization", f"token {token}")
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def check(self, timeout=90):
        if self.error:
            return {"status": "failed", "reason": self.error}
        end = time.time() + timeout
        status = None
        while time.time() < end:
            if self.proc.poll() is not None:
                return {"status": "failed", "reason": f"jupyter lab exited {self.proc.returncode}: {self._tail()}"}
            try:
                status = self._get("/api/status", self.token)
                break
            except OSError:
                time.sleep(0.3)
        if status is None:
            return {"status": "failed", "reason": f"jupyter lab did not answer within {timeout:.0f} s: {self._tail()}"}
        startup = round(time.time() - self.t0, 2)
        try:
            no_token = self._get("/api/status", None)
            lab = self._get(f"/lab?token={self.token}", None)
        except OSError as exc:
            return {"status": "failed", "reason": f"HTTP error: {exc}"}
        fig = {"port": self.port, "with_token": status, "without_token": no_token, "lab_page": lab,
               "startup_seconds": startup}
        if status == 200 and lab == 200 and no_token in (401, 403):
            return {"status": "passed", "reason": f"HTTP {status} with token, {no_token} without", "figures": fig}
        return {"status": "failed", "reason": f"with token {status} (want 200), /lab {lab} (want 200), "
                f"without token {no_token} (want 401/403)", "figures": fig}


def sshd_check():
    sshd = which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if not sshd:
        return {"status": "failed", "reason": "sshd not found"}
    fig = {"sshd": sshd}
    out = subprocess.run([sshd, "-t"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 and "privilege separation directory" in out.stderr and os.getuid() == 0:
        # as root sshd wants /run/sshd, which start-sshd makes at container start (a tmpfs is empty in an image)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        fig["made_privsep_dir"] = "/run/sshd"
        out = subprocess.run([sshd, "-t"], capture_output=True, text=True, timeout=30)
    key_args = []
    work = None
    if out.returncode != 0 and ("host key" in out.stderr.lower() or "no hostkeys" in out.stderr.lower()):
        # non-root cannot read the host keys (or the image generates them at start): test with a throwaway key
        work = tempfile.mkdtemp(prefix="ibprobe-ssh-")
        keygen = which("ssh-keygen") or "/usr/bin/ssh-keygen"
        k = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(work, "k")],
                           capture_output=True, text=True, timeout=30)
        if k.returncode == 0:
            key_args = ["-h", os.path.join(work, "k")]
            fig["first_try"] = out.stderr.strip()[-300:]
            out = subprocess.run([sshd, "-t"] + key_args, capture_output=True, text=True, timeout=30)
    fig["config_test_rc"] = out.returncode
    try:
        if out.returncode != 0:
            return {"status": "failed", "reason": f"sshd -t failed: {out.stderr.strip()[-800:]}", "figures": fig}
        eff = subprocess.run([sshd, "-T"] + key_args, capture_output=True, text=True, timeout=30)
        if eff.returncode == 0:
            conf = parse_sshd_T(eff.stdout)
            fig["source"] = "sshd -T"
        else:
            texts = []
            for path in ["/etc/ssh/sshd_config"] + sorted(
                    os.path.join("/etc/ssh/sshd_config.d", f) for f in listdir("/etc/ssh/sshd_config.d")
                    if f.endswith(".conf")):
                try:
                    with open(path) as fh:
                        texts.append(fh.read())
                except OSError:
                    pass
            conf = parse_sshd_config_files(texts[1:] + texts[:1])  # Include of sshd_config.d comes first
            fig["source"] = "config files"
        pa = conf.get("passwordauthentication", "yes").lower()
        fig["passwordauthentication"] = pa
        fig["permitrootlogin"] = conf.get("permitrootlogin")
        if pa != "no":
            return {"status": "failed", "reason": f"PasswordAuthentication is {pa!r}, want 'no'", "figures": fig}
        return {"status": "passed", "reason": "sshd -t passed; PasswordAuthentication no", "figures": fig}
    finally:
        if work:
            rmtree(work)
