"""The one credential rule (imagebuild.secrets) over every URL form, and the outputs that use it."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagebuild.secrets import has_credentials, redact, split_userinfo, strip_credentials

CREDENTIALED = [
    ("https://user:pw@host/simple", "https://user:***@host/simple", "https://host/simple", ("user", "pw")),
    ("https://TOKEN123@host/simple", "https://***@host/simple", "https://host/simple", ("TOKEN123", "")),
    ("https://:onlypw@host/simple", "https://:***@host/simple", "https://host/simple", ("", "onlypw")),
    ("https://u:p%40ss@host:8443/x", "https://u:***@host:8443/x", "https://host:8443/x", ("u", "p@ss")),
    ("https://u:raw@at@host/x", "https://u:***@host/x", "https://host/x", ("u", "raw@at")),
    # issue 25: raw characters RFC 3986 wants percent-encoded, as people write them in passwords
    ("https://u:pa/ss@host/simple", "https://u:***@host/simple", "https://host/simple", ("u", "pa/ss")),
    ("https://u:pa#ss@host/simple", "https://u:***@host/simple", "https://host/simple", ("u", "pa#ss")),
    ("https://u:pa?ss@host/simple", "https://u:***@host/simple", "https://host/simple", ("u", "pa?ss")),
    ("https://u:pa$ss@host/simple", "https://u:***@host/simple", "https://host/simple", ("u", "pa$ss")),
    ("https://u:p%2Fw%23d@host/x", "https://u:***@host/x", "https://host/x", ("u", "p/w#d")),
    ("https://u:a/b#c?d@e@[::1]:5000/x", "https://u:***@[::1]:5000/x", "https://[::1]:5000/x", ("u", "a/b#c?d@e")),
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
                                  "https://host/x?page=2", "mail me at a@b.c",
                                  "git+https://github.com/o/r.git@v1.0#egg=r", "https://art/api/pypi@remote/simple"])
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


def test_a_url_too_malformed_for_the_rule_is_masked_whole_when_refused():
    from imagebuild.secrets import redact_url

    assert redact_url('https://u:pa"ss@host/simple') == "https://***@host/simple"
    assert redact_url("https://u:pa ss@host/simple") == "https://***@host/simple"
    assert redact_url("https://u:pw@host/simple") == "https://u:***@host/simple"
    assert redact_url("https://host/simple") == "https://host/simple"


_PASSWORD = st.text(alphabet=st.sampled_from(list("aZ09/#?@$%:;&=+!*'()[]~,.-_é")), min_size=4, max_size=16)


@settings(max_examples=300, deadline=None)
@given(password=_PASSWORD, host=st.sampled_from(["host", "h.example:8443", "[::1]:5000", "10.0.0.1"]))
def test_no_raw_password_survives_redaction(password, host):
    url = f"https://user:{password}@{host}/simple"
    for text in (url, f"pip: Looking in indexes: {url} (exit 1)", f'{{"url":"{url}","b":1}}', f"'{url}'"):
        out = redact(text)
        assert f":{password}@" not in out and "user:***@" in out
    assert has_credentials(url)
    assert split_userinfo(url)[1:] == ("user", urllib.parse.unquote(password))
    assert strip_credentials(url) == f"https://{host}/simple"


_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("password", ["Pa/Ss9w", "Pa#Ss9w", "Pa$Ss9w", "Pa%2FSs9w", "Pa@Ss9w", 'Pa"Ss9w', "Pa Ss9w"])
def test_no_output_or_written_file_shows_an_index_or_mirror_password(tmp_path, password):
    """Issue 25: validate's error, the rendered Dockerfile's "(credentials redacted)" comment, the bake file and every
    message: the password (raw, or percent-decoded) appears in none of them, whatever it holds."""
    matrix = tmp_path / "m.yaml"
    matrix.write_text((_ROOT / "images" / "cpu.yaml").read_text().replace(
        "  base_image: bootstrap", f"  base_image: bootstrap\n  mirror: https://mir:{password}@deb.example/debian\n"
                                   f"  torch_index_url: https://tix:{password}@pypi.example/torch", 1))
    plain = tmp_path / "plain.yaml"
    plain.write_text((_ROOT / "images" / "cpu.yaml").read_text())
    index = [f"--pip-index-url=https://pix:{password}@pypi.example/simple",
             f"--pip-extra-index-url=https://eix:{password}@pypi2.example/simple"]
    runs = [["validate", "-m", str(matrix)], ["render", "-m", str(matrix), "--out", str(tmp_path / "r1")],
            ["render", "-m", str(plain), "--out", str(tmp_path / "r2"), *index],
            ["bake", "-m", str(plain), "-o", str(tmp_path / "bake.json"), *index]]
    secrets = {password[2:], urllib.parse.unquote(password)[2:]}
    for args in runs:
        res = subprocess.run([sys.executable, "-m", "imagebuild", *args], capture_output=True, text=True,
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(_ROOT / "src")})
        assert "Traceback" not in res.stderr, res.stderr
        assert not any(s in res.stdout + res.stderr for s in secrets), (args, res.stdout + res.stderr)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".yaml"]
    assert any(p.name == "Dockerfile" for p in written) or ('"' in password or " " in password)
    for path in written:
        text = path.read_bytes().decode("utf-8", "replace")
        assert not any(s in text for s in secrets), path
