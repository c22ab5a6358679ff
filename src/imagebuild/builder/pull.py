"""Registry base references (`ubuntu:24.04@sha256:...`): pulled with the SDK when missing, errors from the stream."""

from __future__ import annotations

from collections.abc import Callable

from imagebuild.errors import ImagebuildError
from imagebuild.oci import Reference, ReferenceError
from imagebuild.secrets import redact


class PullError(ImagebuildError):
    pass


def digest_warning(ref: str) -> str | None:
    if Reference.parse(ref).digest is not None:
        return None
    return (f"base image {ref} is not pinned by digest: upstream tags move; "
            f"pin it as {ref}@sha256:<digest>")


def ensure_pulled(client, ref: str, warn: Callable[[str], None] | None = None,
                  on_line: Callable[[str], None] | None = None) -> str:
    """Image ID of `ref`, pulling it when the engine does not have it. Errors in the pull stream fail."""
    import docker

    try:
        parsed = Reference.parse(ref)
    except ReferenceError as exc:
        raise PullError(f"base image {ref!r} is not a valid image reference: {exc}") from None
    w = digest_warning(ref)
    if w and warn:
        warn(w)
    try:
        return client.api.inspect_image(ref)["Id"]
    except docker.errors.ImageNotFound:
        pass
    try:
        stream = client.api.pull(parsed.name, tag=parsed.digest or parsed.tag or "latest", stream=True, decode=True)
        for chunk in stream:
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error") or chunk.get("errorDetail"):
                msg = chunk.get("error") or (chunk.get("errorDetail") or {}).get("message")
                raise PullError(f"pulling base image {ref} failed: {redact(str(msg))} (offline alternative: "
                                "base_image: bootstrap)")
            if on_line and chunk.get("status") and "progress" not in chunk:
                on_line(f"{chunk.get('id', '')} {chunk['status']}".strip())
    except docker.errors.APIError as exc:
        raise PullError(f"pulling base image {ref} failed: {redact(exc.explanation or str(exc))} (offline "
                        "alternative: base_image: bootstrap)") from None
    try:
        return client.api.inspect_image(ref)["Id"]
    except docker.errors.ImageNotFound:
        raise PullError(f"pulling base image {ref} finished but the engine does not have it") from None
