"""A UTF-8 locale: LANG/LC_ALL name a UTF-8 locale that exists in the image; python's encodings are UTF-8."""

import pytest

pytestmark = pytest.mark.section("locale")


def test_utf8_locale(check):
    check("locale.utf8")


def test_python_encoding(check):
    check("locale.python")
