"""The one place that runs cosign (sigstore's signer, 2.5 from Debian trixie: scripts/cosign.sh install).

Why a subprocess: the formats admission controllers check (cosign's simple-signing payload in `sha256-<digest>.sig`,
DSSE-wrapped in-toto statements in `.att`) are cosign's own; the tool that writes them is the one that verifies them.

What never reaches cosign's command line (where `ps` shows it): the key's password (COSIGN_PASSWORD in cosign's
environment only, stdin closed so cosign never waits on a prompt) and registry credentials (a private DOCKER_CONFIG
folder of our own, mode 0700, removed when cosign exits). cosign's messages (stderr) are redacted before anything
shows them; its stdout is data (JSON lines, a PEM key) that is parsed, never shown, and kept byte for byte (masking
it as text would let a password `null` or `sha256` change what verification reads).
Key-based and private-registry: `--tlog-upload=false` when signing and `--insecure-ignore-tlog` when verifying (no
Rekor, no Fulcio: nothing leaves for the public sigstore services).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.errors import ImagebuildError
from imagebuild.oci import RegistryAuth, RegistryClient
from imagebuild.oci.registry import CERTS_D
from imagebuild.secrets import redact, register_secret

ENV_COSIGN = "IMAGEBUILD_COSIGN"  # a cosign binary to run instead of the installed one
ENV_TOOLS = "IMAGEBUILD_TOOLS_DIR"  # where scripts/cosign.sh installs it: TOOLS/bin/cosign
TIMEOUT = 300.0  # one cosign call: a few registry round trips


class CosignMissing(ImagebuildError):
    """No cosign binary (exit 1): the message says how to install it."""


@dataclass(frozen=True)
class CosignResult:
    returncode: int
    stdout: str  # as cosign wrote it: parsed, never shown
    stderr: str  # redacted

    @property
    def error(self) -> str:
        """cosign's own reason: its `Error: …` line (the last), else the last line it wrote."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        errors = [ln.removeprefix("Error: ") for ln in lines if ln.startswith("Error: ")]
        return (errors or lines or [f"cosign exited {self.returncode}"])[-1]


@dataclass(frozen=True)
class Registry:
    """How cosign reaches one registry: plain http allowed (loopback registries, as the engine allows), a CA file,
    and credentials (None: cosign's own lookup, the caller's docker config)."""

    host: str
    allow_http: bool = False
    ca_file: str | None = None
    auth: RegistryAuth | None = field(default=None, repr=False)
    # the same registry for our own reads (signer.py: is there any signature at all, before a cosign run asks whose)
    client: RegistryClient | None = field(default=None, repr=False, compare=False)

    def flags(self) -> list[str]:
        out = ["--allow-http-registry"] if self.allow_http else []
        return out + (["--registry-cacert", self.ca_file] if self.ca_file else [])


def cosign_registry(client: RegistryClient, ca_file: str | None = None) -> Registry:
    """How cosign reaches the registry `client` talks to: the same scheme (http only where the client found it),
    the same CA file (given, else /etc/docker/certs.d/<registry>/ca.crt) and the same credentials."""
    ca = ca_file
    if ca is None and (CERTS_D / client.registry / "ca.crt").is_file():
        ca = str(CERTS_D / client.registry / "ca.crt")
    return Registry(client.registry, allow_http=client.scheme() == "http", ca_file=ca, auth=client.auth,
                    client=client)



def _checkout_tools() -> Path:
    return Path(__file__).resolve().parents[3] / ".tools"


def find_cosign() -> str:
    """IMAGEBUILD_COSIGN, else TOOLS/bin/cosign (IMAGEBUILD_TOOLS_DIR or the checkout's .tools/), else `cosign` on
    PATH; CosignMissing saying how to install it."""
    explicit = os.environ.get(ENV_COSIGN)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise CosignMissing(f"{ENV_COSIGN}={explicit}: not an executable file")
        return explicit
    tools = Path(os.environ.get(ENV_TOOLS) or _checkout_tools())
    for candidate in (tools / "bin" / "cosign", _checkout_tools() / "bin" / "cosign"):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("cosign")
    if found:
        return found
    raise CosignMissing(f"cosign is not installed (looked in {tools / 'bin'} and PATH): run `make install` or "
                        f"scripts/cosign.sh install, or set {ENV_COSIGN}")


def _docker_config(folder: Path, auth: RegistryAuth) -> None:
    """A config.json holding only this registry's credentials (what go-containerregistry's keychain reads)."""
    entry: dict[str, str] = {}
    if auth.identity_token:
        entry["identitytoken"] = auth.identity_token
    elif auth.username and auth.password:
        entry["auth"] = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()
    path = folder / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"auths": {auth.registry: entry}}, f)


def run_cosign(args: Sequence[str], *, password: str | None = None, registry: Registry | None = None,
               timeout: float = TIMEOUT) -> CosignResult:
    """cosign ARGS with the key's password and the registry's credentials handed over out of sight (see the module
    docstring); the result's messages redacted. CosignMissing without a binary."""
    binary = find_cosign()
    env = {k: v for k, v in os.environ.items() if k != "COSIGN_PASSWORD"}
    env["COSIGN_PASSWORD"] = password or ""  # never a prompt and never stdin: an empty password is a wrong one
    register_secret(password)
    with tempfile.TemporaryDirectory(prefix="imagebuild-cosign-") as tmp:
        os.chmod(tmp, 0o700)
        auth = registry.auth if registry is not None else None
        if auth is not None and not auth.anonymous:
            _docker_config(Path(tmp), auth)
            env["DOCKER_CONFIG"] = tmp
        try:
            done = subprocess.run([binary, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return CosignResult(124, "", f"Error: cosign {args[0]} did not finish in {timeout:.0f} s")
        except OSError as exc:
            raise CosignMissing(f"cosign ({binary}) does not run: {exc}") from None
    return CosignResult(done.returncode, done.stdout, redact(done.stderr))


def version() -> str:
    """`cosign version`'s GitVersion (Debian's build says `devel`: then the installed package version file)."""
    binary = find_cosign()
    stamp = Path(binary + ".version")
    if stamp.is_file():
        return stamp.read_text(encoding="utf-8").strip()
    done = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    for line in done.stdout.splitlines():
        if line.startswith("GitVersion:"):
            return line.split(":", 1)[1].strip()
    return "unknown"
