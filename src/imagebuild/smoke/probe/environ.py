"""os.environ for a block: set or remove variables, then put back what was there (standard library only)."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def environ_set(values):
    """Set (or, for None, remove) each variable of `values` in os.environ for the `with` block, then put back what
    was there."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        _apply_environ(values)
        yield
    finally:
        _apply_environ(saved)


def _apply_environ(values):
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
