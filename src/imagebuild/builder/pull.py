"""Registry base references (`ubuntu:24.04@sha256:...`): pulled through the image store when missing; an error in
the pull stream (engine.stream) fails it with the engine's text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from imagebuild.engine.store import ImageStore
from imagebuild.engine.stream import EngineError
from imagebuild.errors import ImagebuildError
from imagebuild.oci import Reference, ReferenceSyntaxError


class PullError(ImagebuildError):
    pass


def digest_warning(ref: str) -> str | None:
    if Reference.parse(ref).digest is not None:
        return None
    return (f"base image {ref} is not pinned by digest: upstream tags move; "
            f"pin it as {ref}@sha256:<digest>")


def ensure_pulled(store: ImageStore, ref: str, warn: Callable[[str], None] | None = None,
                  on_line: Callable[[str], None] | None = None) -> str:
    """Image ID of `ref`, pulling it when the engine does not have it. Errors in the pull stream fail."""
    try:
        parsed = Reference.parse(ref)
    except ReferenceSyntaxError as exc:
        raise PullError(f"base image {ref!r} is not a valid image reference: {exc}") from None
    w = digest_warning(ref)
    if w and warn:
        warn(w)
    have = store.image_id(ref)
    if have is not None:
        return have

    def status(chunk: dict[str, Any]) -> None:
        if on_line and chunk.get("status") and "progress" not in chunk:
            on_line(f"{chunk.get('id', '')} {chunk['status']}".strip())

    try:
        store.pull(parsed.name, parsed.digest or parsed.tag or "latest", on_chunk=status)
    except EngineError as exc:  # the engine's own words (an error chunk in the stream, or a refused call)
        raise PullError(f"pulling base image {ref} failed: {exc} (offline alternative: base_image: bootstrap)") \
            from None
    pulled = store.image_id(ref)
    if pulled is None:
        raise PullError(f"pulling base image {ref} finished but the engine does not have it")
    return pulled
