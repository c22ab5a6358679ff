"""The skopeo command (Debian's 1.9): registry copies in the formats the engine cannot write or read itself.

One home for how skopeo is called and how its answers are read: its version, its credentials (a containers-auth.json
file, mode 0600 in a private folder, never a command-line flag), its `level=fatal msg="…"` message (redacted), and
whether that message says a registry refused a format. push/skopeo.py writes images with it (zstd or gzip, by
digest); `fetch_archive` reads one back for an engine that cannot inflate zstd layers (Docker 20.10's pull): skopeo
writes a docker-archive whose layers are decompressed and whose config is the pushed config byte for byte, so the
engine's `docker load` gives the image the ID the registry's config digest names.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from imagebuild.errors import ImagebuildError
from imagebuild.oci.auth import RegistryAuth
from imagebuild.secrets import redact

SKOPEO = os.environ.get("IMAGEBUILD_SKOPEO", "skopeo")
_REFUSED = re.compile(r"manifest invalid|manifest_invalid|unsupported|unknown media ?type|media type .* not|"
                      r"\b415\b|invalid manifest|blob unknown to registry.*zstd", re.I)
_FATAL_LINE = re.compile(r'msg="((?:[^"\\]|\\.)*)"')


class CopyError(ImagebuildError):
    """skopeo failed (exit 1); `text` is its own message, redacted."""


class FormatRefused(CopyError):
    """The registry refused the manifest's media types (OCI, zstd layers): nothing was tagged."""


def skopeo_version(binary: str = SKOPEO) -> str:
    """`skopeo version 1.9.3` -> "1.9.3"; CopyError naming the package when it is not installed."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        raise CopyError(f"{binary}: not found; push needs skopeo (apt-get install skopeo; scripts/system-deps.sh)") \
            from None
    return out.stdout.strip().rsplit(" ", 1)[-1]


def auth_file_doc(auth: RegistryAuth) -> dict[str, Any]:
    """The containers-auth.json document for `auth` (empty `auths` when anonymous)."""
    if auth.identity_token:
        entry = {"auth": base64.b64encode(f"{auth.username or '<token>'}:".encode()).decode(),
                 "identitytoken": auth.identity_token}
    elif auth.username and auth.password:
        entry = {"auth": base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()}
    else:
        return {"auths": {}}
    return {"auths": {auth.registry: entry}}


def skopeo_message(stderr: str) -> str:
    """skopeo's `level=fatal msg="…"` text (unquoted), else its last line; redacted."""
    found = _FATAL_LINE.findall(stderr)
    text = found[-1].encode().decode("unicode_escape", "replace") if found else (stderr.strip().splitlines() or [""])[-1]
    return redact(text.strip() or "skopeo failed without a message")


def refused_format(message: str) -> bool:
    """Does skopeo's message say the registry refused the manifest or its media types?"""
    return bool(_REFUSED.search(message))


def write_auth_file(path: Path, auth: RegistryAuth) -> Path:
    """`auth` as a containers-auth.json file at `path`, created mode 0600 (its folder must be private)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(auth_file_doc(auth), fh)
    return path


def auth_from_sdk(registry: str, sdk: Mapping[str, Any] | None) -> RegistryAuth:
    """The RegistryAuth an engine auth_config dict (RegistryAuth.sdk_auth_config) was made from."""
    sdk = sdk or {}
    return RegistryAuth(registry, username=sdk.get("username"), password=sdk.get("password"),
                        identity_token=sdk.get("identitytoken"))


def fetch_archive(ref: str, auth: RegistryAuth, work: Path, *, plain_http: bool, binary: str = SKOPEO,
                  run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> Path:
    """`ref` (name@sha256:…) copied into `work`/image.tar as a docker-archive: layers decompressed (gzip or zstd),
    the config as the registry holds it. `work` must be a private folder the caller removes.

    Two copies: skopeo 1.9 refuses to write zstd layers into a docker-archive ("zstd compression is not supported
    for docker images") even when asked to decompress, so the image is first copied decompressed into a `dir:`
    folder (OCI media types, uncompressed layers), then from there into the archive (removing the folder)."""
    layout, archive = work / "layout", work / "image.tar"
    authfile = write_auth_file(work / "auth.json", auth)
    src = ["--src-authfile", str(authfile), *(["--src-tls-verify=false"] if plain_http else [])]
    try:
        for args in (["--dest-decompress", *src, f"docker://{ref}", f"dir:{layout}"],
                     [f"dir:{layout}", f"docker-archive:{archive}"]):
            try:
                out = run([binary, "copy", "--quiet", "--retry-times", "0", *args], capture_output=True, text=True,
                          check=False)
            except OSError:
                skopeo_version(binary)  # names the package
                raise
            if out.returncode != 0:
                raise CopyError(f"{ref}: {skopeo_message(out.stderr)}")
    finally:
        authfile.unlink(missing_ok=True)
        shutil.rmtree(layout, ignore_errors=True)
    return archive
