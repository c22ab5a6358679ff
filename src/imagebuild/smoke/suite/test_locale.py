"""A UTF-8 locale: LANG/LC_ALL name a UTF-8 locale that exists in the image; python's encodings are UTF-8."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("locale")


def test_utf8_locale(check: Callable[..., dict[str, Any]]) -> None:
    check("locale.utf8")


def test_python_encoding(check: Callable[..., dict[str, Any]]) -> None:
    check("locale.python")
