"""The one retry policy for registry and engine calls: how many more attempts, how long to wait before each, and
which failures deserve one.

Registries and engines fail transiently (5xx, 429, a reset connection, a timeout, an upload the registry lost);
credentials that are refused, a tag that does not exist or a broken image never get better. Every loop that retries
such a call (the registry client's requests and token fetches, the engine's push) runs through `RetryPolicy.call`,
so the arithmetic (exponential backoff with a ceiling) and the bookkeeping exist once. The figures per kind of call
are the named policies below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 4  # attempts after the first
    backoff: float = 0.5  # seconds before the first retry; doubled for each further one
    max_backoff: float = 30.0

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 = the first retry)."""
        return float(min(self.max_backoff, self.backoff * (2 ** (retry - 1))))

    def call(self, attempt: Callable[[], T], *, retryable: Callable[[Exception], bool],
             sleep: Callable[[float], None] = time.sleep,
             on_retry: Callable[[Exception, int, float], None] | None = None) -> T:
        """`attempt()` until it returns; a failure `retryable` accepts is tried again after `delay`, at most
        `retries` times (`on_retry(exc, retry, delay)` before each wait); the last failure propagates."""
        retry = 0
        while True:
            try:
                return attempt()
            except Exception as exc:
                if retry >= self.retries or not retryable(exc):
                    raise
                retry += 1
                wait = self.delay(retry)
                if on_retry is not None:
                    on_retry(exc, retry, wait)
                sleep(wait)


REGISTRY = RetryPolicy(retries=4, backoff=0.5, max_backoff=30.0)  # one HTTP request to a registry
ENGINE_PUSH = RetryPolicy(retries=4, backoff=2.0, max_backoff=60.0)  # one `push` through the engine: whole uploads
