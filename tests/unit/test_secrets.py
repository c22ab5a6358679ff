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


def test_one_rule_no_module_keeps_its_own_credential_pattern():
    """The bootstrap, apt and preflight code each had their own userinfo regex, and they disagreed."""
    import re
    from pathlib import Path

    import imagebuild

    root = Path(imagebuild.__file__).parent
    own = []
    for path in root.rglob("*.py"):
        if path.name == "secrets.py" or "probe" in path.parts:  # the in-image probe cannot import imagebuild
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"re\.compile\(.*://.*@", line) or re.search(r"urlsplit\(.*\)\.(username|password)", line) \
                    or re.search(r"\bparts\.(username|password)\b", line):
                own.append(f"{path.relative_to(root)}:{n}")
    assert own == []


def test_outputs_use_the_rule_for_token_only_urls():
    from imagebuild.inputs import BuildInputs

    public = BuildInputs(pip_index_url="https://tok3n@idx.example/simple",
                         pip_extra_index_urls=("https://:pw0rd@x.example/simple",)).public()
    assert public["pip_index_url"] == "https://***@idx.example/simple"
    assert public["pip_extra_index_urls"] == ["https://:***@x.example/simple"]


def test_registered_url_credentials_are_hidden_even_without_their_url():
    from imagebuild.secrets import register_url_credentials

    register_url_credentials("https://u:pw%2Fwith-slash@a.example/simple https://t0ken-only-xyz@b.example/simple")
    assert redact("auth failed for pw/with-slash and t0ken-only-xyz") == "auth failed for *** and ***"
