"""The one credential rule (imagebuild.secrets) over every URL form, and the outputs that use it."""

from __future__ import annotations

import pytest

from imagebuild.secrets import has_credentials, redact, split_userinfo, strip_credentials

CREDENTIALED = [
    ("https://user:pw@host/simple", "https://user:***@host/simple", "https://host/simple", ("user", "pw")),
    ("https://TOKEN123@host/simple", "https://***@host/simple", "https://host/simple", ("TOKEN123", "")),
    ("https://:onlypw@host/simple", "https://:***@host/simple", "https://host/simple", ("", "onlypw")),
    ("https://u:p%40ss@host:8443/x", "https://u:***@host:8443/x", "https://host:8443/x", ("u", "p@ss")),
    ("https://u:raw@at@host/x", "https://u:***@host/x", "https://host/x", ("u", "raw@at")),
]


@pytest.mark.parametrize(("url", "masked", "stripped", "creds"), CREDENTIALED)
def test_every_userinfo_form_is_a_credential(url, masked, stripped, creds):
    assert has_credentials(url)
    assert redact(url) == masked
    assert redact(f"pip failed for {url} (exit 1)") == f"pip failed for {masked} (exit 1)"
    assert strip_credentials(url) == stripped
    assert split_userinfo(url) == (stripped, *creds)


@pytest.mark.parametrize("url", ["https://host/x?token=s3cret", "https://host/x?a=1&access_token=s3cret",
                                 "https://b.s3/x?X-Amz-Signature=s3cret&X-Amz-Date=1"])
def test_credential_query_values(url):
    assert has_credentials(url)
    assert "s3cret" not in redact(url) and "s3cret" not in strip_credentials(url)
    assert "***" in redact(url)


@pytest.mark.parametrize("text", ["https://download.pytorch.org/whl/cu128", "debian:12@sha256:" + "e" * 64,
                                  "docker-image://debian:12@sha256:" + "e" * 64, "reg.example/ml/a@sha256:" + "1" * 64,
                                  "https://host/x?page=2", "mail me at a@b.c"])
def test_no_credential_left_alone(text):
    assert not has_credentials(text)
    assert redact(text) == text == strip_credentials(text)
