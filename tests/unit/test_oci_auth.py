"""Credential sources and their precedence; secrets never leak into logs."""

from __future__ import annotations

import base64
import io
import json
import os
import stat

import pytest

from imagebuild.errors import UsageError
from imagebuild.oci import Reference, read_password_stdin, resolve_auth
from imagebuild.secrets import redact

REG = "127.0.0.1:5000"


def _config(tmp_path, doc) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_options_win_and_are_registered_as_secrets(tmp_path):
    env = {"IMAGEBUILD_REGISTRY_USER": "envuser", "IMAGEBUILD_REGISTRY_PASSWORD": "env-pass-1"}
    a = resolve_auth(REG, "bob", "opt-pass-1", env=env, docker_config=_config(tmp_path, {}))
    assert (a.username, a.password, a.source) == ("bob", "opt-pass-1", "options")
    assert redact("x opt-pass-1 y") == "x *** y"
    assert "opt-pass-1" not in repr(a) and "opt-pass-1" not in a.describe()


def test_username_with_password_from_environment(tmp_path):
    a = resolve_auth(REG, "bob", None, env={"IMAGEBUILD_REGISTRY_PASSWORD": "env-pass-2"})
    assert (a.username, a.password) == ("bob", "env-pass-2")


def test_username_without_password_is_a_usage_error():
    with pytest.raises(UsageError, match="password-stdin"):
        resolve_auth(REG, "bob", None, env={})


def test_password_without_username_is_a_usage_error():
    with pytest.raises(UsageError, match="needs --username"):
        resolve_auth(REG, None, "pw-1234", env={})


def test_environment_pair(tmp_path):
    env = {"IMAGEBUILD_REGISTRY_USER": "envuser", "IMAGEBUILD_REGISTRY_PASSWORD": "env-pass-3"}
    a = resolve_auth(REG, env=env, docker_config=_config(tmp_path, {}))
    assert (a.username, a.source) == ("envuser", "environment")
    assert a.sdk_auth_config() == {"username": "envuser", "password": "env-pass-3", "serveraddress": REG}


def test_docker_config_auths(tmp_path):
    auth = base64.b64encode(b"carol:cfg-pass-4").decode()
    cfg = _config(tmp_path, {"auths": {REG: {"auth": auth}}})
    a = resolve_auth(REG, env={}, docker_config=cfg)
    assert (a.username, a.password, a.source) == ("carol", "cfg-pass-4", "docker-config")
    assert redact("cfg-pass-4") == "***"
    assert resolve_auth("other.example:5000", env={}, docker_config=cfg).anonymous


def test_docker_config_credential_helper(tmp_path, monkeypatch):
    helper = tmp_path / "bin" / "docker-credential-ibtest"
    helper.parent.mkdir()
    helper.write_text('#!/bin/sh\nread server\n'
                      'printf \'{"ServerURL":"%s","Username":"dave","Secret":"helper-pass-5"}\' "$server"\n')
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{helper.parent}{os.pathsep}{os.environ['PATH']}")
    cfg = _config(tmp_path, {"credHelpers": {REG: "ibtest"}})
    a = resolve_auth(REG, env={}, docker_config=cfg)
    assert (a.username, a.password, a.source) == ("dave", "helper-pass-5", "docker-config")
    assert redact("helper-pass-5") == "***"


def test_identity_token(tmp_path):
    cfg = _config(tmp_path, {"auths": {REG: {"identitytoken": "refresh-token-6"}}})
    a = resolve_auth(REG, env={}, docker_config=cfg)
    assert a.identity_token == "refresh-token-6"
    assert a.sdk_auth_config() == {"identitytoken": "refresh-token-6", "serveraddress": REG}


def test_anonymous(tmp_path):
    a = resolve_auth(REG, env={}, docker_config=_config(tmp_path, {}))
    assert a.anonymous and a.sdk_auth_config() is None


def test_read_password_stdin():
    assert read_password_stdin(io.StringIO("pa ss\n")) == "pa ss"
    assert read_password_stdin(io.StringIO("pass\r\n")) == "pass"
    with pytest.raises(UsageError):
        read_password_stdin(io.StringIO(""))


@pytest.mark.parametrize("ref,reg,path", [
    ("127.0.0.1:5000/ml/pytorch:2.9-cpu", "127.0.0.1:5000", "ml/pytorch"),
    ("localhost/pytorch:1", "localhost", "pytorch"),
    ("ghcr.io/org/img", "ghcr.io", "org/img"),
    ("ubuntu:24.04", "docker.io", "library/ubuntu"),
    ("org/img:1", "docker.io", "org/img"),
    ("reg:5000/a/b@sha256:" + "0" * 64, "reg:5000", "a/b"),
])
def test_reference_parsing(ref, reg, path):
    parsed = Reference.parse(ref)
    assert parsed.registry == reg
    assert parsed.repository == path


@pytest.mark.parametrize(("registry", "target", "refused"), [
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000/token", False),   # the registry's own host
    ("https://reg.example", "https://reg.example:443/token", False),
    ("https://reg.example", "https://auth.example/token", False),      # a token service over https
    ("https://reg.example", "http://auth.example/token", True),        # another host in clear
    ("https://reg.example", "http://reg.example/token", True),         # port 80 is not the registry's 443, in clear
    ("http://127.0.0.1:5000", "http://127.0.0.1:5001/token", True),    # another port is another service
    ("https://reg.example", "file:///etc/passwd", True),
    ("https://reg.example", "ftp://reg.example/token", True),
])
def test_credentials_refused(registry, target, refused):
    from imagebuild.oci.auth import credentials_refused

    assert (credentials_refused(registry, target) is not None) is refused
