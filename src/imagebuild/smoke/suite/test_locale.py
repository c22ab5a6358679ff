"""A UTF-8 locale: LANG/LC_ALL name a UTF-8 locale that exists in the image; python's encodings are UTF-8."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import CheckFn

pytestmark = pytest.mark.section("locale")


def test_utf8_locale(check: CheckFn) -> None:
    check("locale.utf8")


def test_python_encoding(check: CheckFn) -> None:
    check("locale.python")
