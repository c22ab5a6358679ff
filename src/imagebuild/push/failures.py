"""How a push fails: its errors, and which of them are worth another attempt (push/pusher.py retries `Transient`
ones by the one retry policy; an authentication or authorization refusal is never retried)."""

from __future__ import annotations

import re

from imagebuild.errors import ImagebuildError

_AUTH = re.compile(r"unauthorized|authentication required|\bdenied\b|forbidden|\b40[13]\b|insufficient_scope",
                   re.I)
_TRANSIENT = re.compile(
    r"\b5\d\d\b|too ?many ?requests|\b429\b|connection reset|broken pipe|connection refused|timeout|timed out|"
    r"\bEOF\b|blob upload unknown|blob_upload_unknown|TLS handshake|server misbehaving|temporary failure|"
    r"unavailable|use of closed network connection|connection aborted",
    re.I,
)


class PushError(ImagebuildError):
    """A push failed (exit 1)."""


class PushAuthError(PushError):
    """The registry refused the credentials or the access (exit 1, never retried)."""


class Stopped(PushError):
    """What a push waits on before its first write refused (`Pusher(before_write=…)`: the signing key opening
    with its password): raised out of push_plan as it is, with nothing written; `cause` is that refusal."""

    def __init__(self, cause: ImagebuildError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Transient(Exception):
    """One push attempt failed for a reason worth another (the message says which)."""


def classify(message: str) -> str:
    """'auth' | 'transient' | 'fatal' for an error of a push (skopeo's message or the registry's)."""
    if _AUTH.search(message):
        return "auth"
    if _TRANSIENT.search(message):
        return "transient"
    return "fatal"


def refused_message(registry: str, compression: str, detail: str) -> str:
    """The one line for a registry that will not take the manifest's media types."""
    what = "OCI manifests with zstd layers" if compression == "zstd" else "this manifest"
    return (f"registry {registry} refused {what} ({detail}); nothing was tagged: push with `--compression gzip` "
            f"(or `compression: gzip` in the matrix) for registries and runtimes that predate zstd")
