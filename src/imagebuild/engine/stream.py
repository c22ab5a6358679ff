"""The one reader of the engine's JSON streams (build, pull, push, load) and the errors the engine reports.

The engine answers these calls with HTTP 200 and reports a failure as a chunk in the stream, `{"error": ...,
"errorDetail": {"message": ...}}` (a refused `load` even as a bare `{"message": ...}`): a caller that only looks at
the HTTP status reports green on a failed pull or push. `error_text` is the one place that recognises such a chunk;
`read_stream` reads a whole stream with it and raises `EngineStreamError` carrying the engine's own words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from imagebuild.errors import ImagebuildError
from imagebuild.secrets import redact


class EngineError(ImagebuildError):
    """The engine refused a call (its own explanation, redacted) or could not be reached mid-call."""

    def __init__(self, message: str, status: int | None = None, *, connection: bool = False) -> None:
        super().__init__(redact(message))
        self.status = status
        self.connection = connection  # the connection broke or timed out (worth another attempt)


class EngineStreamError(EngineError):
    """A streamed call (pull, push, load) reported errors inside its HTTP-200 stream; `messages` in order, once each."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = list(dict.fromkeys(messages))
        super().__init__("; ".join(self.messages))


def error_text(chunk: object) -> str | None:
    """The engine's error message when `chunk` reports one, else None."""
    if not isinstance(chunk, Mapping):
        return None
    if "error" in chunk or "errorDetail" in chunk:
        detail = chunk.get("errorDetail") or {}
        message = chunk.get("error") or (detail.get("message") if isinstance(detail, Mapping) else detail)
        return redact(str(message or "the engine reported an error without a message")).strip()
    if set(chunk) == {"message"}:  # a refused streaming request the SDK did not turn into an exception
        return redact(str(chunk["message"])).strip()
    return None


def error_code(chunk: Mapping[str, object]) -> int | None:
    detail = chunk.get("errorDetail")
    code = detail.get("code") if isinstance(detail, Mapping) else None
    return code if isinstance(code, int) else None


def read_stream(chunks: Iterable[object], on_chunk: Callable[[dict[str, object]], None] | None = None) -> None:
    """Read the whole stream (never stop at the first chunk); `on_chunk` sees every chunk that is not an error.
    Raises EngineStreamError with every error the stream reported."""
    errors: list[str] = []
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        text = error_text(chunk)
        if text is not None:
            errors.append(text)
        elif on_chunk is not None:
            on_chunk(chunk)
    if errors:
        raise EngineStreamError(errors)
