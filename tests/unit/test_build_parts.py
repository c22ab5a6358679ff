"""Build context tars, bootstrap specs/commands, pull references, engine connection errors, build command inputs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from _support import DEBIAN12, image, variant
from click.testing import CliRunner

from imagebuild.builder import bootstrap
from imagebuild.builder.context import build_context
from imagebuild.builder.pull import digest_warning
from imagebuild.compat import load as load_tables
from imagebuild.engine import connect
from imagebuild.errors import EngineUnavailable
from imagebuild.models import BaseSource, OSInfo
from imagebuild.oci import Reference

UBUNTU = OSInfo(id="ubuntu24.04", family="ubuntu", version="24.04", codename="noble", system_python="3.12",
                installable_pythons=("3.12",), mirror="http://archive.ubuntu.com/ubuntu", glibc="2.39",
                components=("main", "universe"), archive_keys=load_tables().os["ubuntu24.04"].archive_keys,
                keyring="ubuntu-archive.asc")


@pytest.fixture(autouse=True)
def no_mirror_lookups(monkeypatch):
    """Unit tests never ask a mirror for its InRelease date."""
    monkeypatch.setattr(bootstrap, "mirror_epoch", lambda spec, timeout=20.0: "1700000000")


# -- context ----------------------------------------------------------------------------------------------------
def _ctx(img):
    f = build_context(img)
    data = f.read()
    f.close()
    return data


def test_context_is_deterministic_and_holds_files_and_dirs(tmp_path):
    wh = tmp_path / "wheels"
    (wh / "sub").mkdir(parents=True)
    (wh / "a-1.whl").write_bytes(b"A" * 10)
    (wh / "sub" / "b.txt").write_bytes(b"B")
    img = image("a", "runtime", None, context_files={"etc/ca/x.crt": b"PEM", "run.sh": b"#!/bin/sh\n"},
                context_dirs={"wheelhouse": wh})
    one, two = _ctx(img), _ctx(img)
    assert one == two
    with tarfile.open(fileobj=io.BytesIO(one)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile("Dockerfile").read().decode() == img.dockerfile
        assert tar.extractfile("wheelhouse/a-1.whl").read() == b"A" * 10
        assert tar.extractfile("wheelhouse/sub/b.txt").read() == b"B"
        assert tar.extractfile("etc/ca/x.crt").read() == b"PEM"
    assert all(m.mtime == 0 and m.uid == 0 for m in members.values())
    assert members["run.sh"].mode == 0o755 and members["etc/ca/x.crt"].mode == 0o644
    assert members["etc/ca"].isdir()


def test_context_rejects_escaping_paths():
    with pytest.raises(ValueError, match="escapes"):
        build_context(image("a", "base", None, context_files={"../x": b""}))
    with pytest.raises(ValueError, match="Dockerfile"):
        build_context(image("a", "base", None, context_files={"Dockerfile": b""}))


def test_missing_context_dir_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_context(image("a", "base", None, context_dirs={"wheelhouse": tmp_path / "nope"}))


# -- bootstrap --------------------------------------------------------------------------------------------------
def _spec(os=DEBIAN12, **base):
    return bootstrap.spec_for(variant(base=BaseSource(kind="bootstrap", **base), osinfo=os))


def test_bootstrap_spec_defaults_and_hash_inputs():
    s = _spec()
    assert s.mirror == "http://deb.debian.org/debian" and s.codename == "bookworm"
    assert s.packages[:5] == ("python3", "python3-venv", "ca-certificates", "tini", "apt")
    assert s.tag == f"imagebuild-os/debian12:{s.hash()[:12]}"
    assert s.sources() == [
        "deb http://deb.debian.org/debian bookworm main",
        "deb http://deb.debian.org/debian bookworm-updates main",
        "deb http://deb.debian.org/debian-security bookworm-security main",
    ]
    assert _spec(packages=("curl",)).hash() != s.hash()
    assert _spec(mirror="http://mirror.corp/debian").hash() != s.hash()
    assert _spec(snapshot="20251101T000000Z").hash() != s.hash()
    assert _spec(packages=("curl",)).hash() == _spec(packages=("curl", "curl")).hash()


def test_internal_mirror_uses_only_the_suite_and_credentials_do_not_change_the_hash():
    a = _spec(mirror="http://mirror.corp/debian")
    b = _spec(mirror="http://user:pa55word@mirror.corp/debian")
    assert a.sources() == ["deb http://mirror.corp/debian bookworm main"]
    assert a.hash() == b.hash()


def test_snapshot_urls():
    s = _spec(snapshot="20251101T000000Z")
    assert s.sources()[0] == "deb http://snapshot.debian.org/archive/debian/20251101T000000Z/ bookworm main"
    assert "archive/debian-security/20251101T000000Z/ bookworm-security" in s.sources()[2]
    t = _spec(mirror="http://mirror.corp/snap/{snapshot}/debian", snapshot="20250101")
    assert t.sources() == ["deb http://mirror.corp/snap/20250101/debian bookworm main",
                           "deb http://mirror.corp/snap/20250101/debian bookworm-updates main"]


def test_ubuntu_suites_and_components():
    s = _spec(os=UBUNTU)
    assert s.is_ubuntu
    assert s.sources() == [
        "deb http://archive.ubuntu.com/ubuntu noble main universe",
        "deb http://archive.ubuntu.com/ubuntu noble-updates main universe",
        "deb http://archive.ubuntu.com/ubuntu noble-security main universe",
    ]


def test_mmdebstrap_command(tmp_path, monkeypatch):
    s = _spec(packages=("curl",), snapshot="20251101T000000Z")
    cmd, env = bootstrap._command("mmdebstrap", s, tmp_path / "r.tar", tmp_path)
    assert cmd[:2] == ["mmdebstrap", "--variant=minbase"]
    assert "--include=python3,python3-venv,ca-certificates,tini,apt,curl" in cmd
    assert "--format=tar" in cmd and 'Acquire::Check-Valid-Until "false"' in " ".join(cmd)
    assert cmd[cmd.index("bookworm") + 1] == str(tmp_path / "r.tar")
    assert env["SOURCE_DATE_EPOCH"] == "1761955200"


def test_mirror_credentials_go_to_an_auth_file_not_the_sources(tmp_path):
    s = _spec(mirror="http://user:pa55word@mirror.corp/debian")
    cmd, _ = bootstrap._command("mmdebstrap", s, tmp_path / "r.tar", tmp_path)
    joined = " ".join(cmd)
    assert "pa55word" not in joined and "deb http://mirror.corp/debian bookworm main" in cmd
    assert "machine mirror.corp/debian login user password pa55word" in (tmp_path / "auth.conf").read_text()
    assert "Dir::Etc::netrc" in joined


def test_apt_trusts_only_the_pinned_archive_keys(tmp_path):
    cmd, env = bootstrap._command("mmdebstrap", _spec(os=UBUNTU), tmp_path / "r.tar", tmp_path)
    keyring = Path(next(a for a in cmd if a.startswith("--keyring="))[len("--keyring="):])
    assert keyring.parent.parent == tmp_path and oct(keyring.stat().st_mode)[-3:] == "644"  # _apt reads it
    assert sorted(bootstrap.fingerprints(keyring, tmp_path / "gnupg")) == sorted(UBUNTU.archive_keys)
    assert env["SOURCE_DATE_EPOCH"] == "1700000000"  # no snapshot: the mirror's InRelease date


def test_os_without_pinned_keys_is_a_clear_error(tmp_path):
    import dataclasses

    with pytest.raises(bootstrap.BootstrapError, match="no archive key fingerprints"):
        bootstrap._command("mmdebstrap", _spec(os=dataclasses.replace(UBUNTU, archive_keys=())), tmp_path / "r.tar",
                           tmp_path)


def test_existing_bootstrap_is_reused():
    from _fake_engine import FakeEngine

    c = FakeEngine()
    s = _spec()
    iid = c.add_image(None, {bootstrap.HASH_LABEL: s.hash()})
    res = bootstrap.ensure_bootstrap(c, s)
    assert res.reused and res.image_id == iid and c.tags[s.tag] == iid


# -- pull / engine ----------------------------------------------------------------------------------------------
def test_reference_parts_and_digest_warning():
    def parts(text):
        ref = Reference.parse(text)
        return ref.name, ref.tag, ref.digest

    digest = "sha256:" + "ab" * 32
    assert parts(f"ubuntu:24.04@{digest}") == ("ubuntu", "24.04", digest)
    assert parts("localhost:5000/x/y:1") == ("localhost:5000/x/y", "1", None)
    assert parts("localhost:5000/x/y") == ("localhost:5000/x/y", None, None)
    assert digest_warning(f"ubuntu:24.04@{digest}") is None
    assert "not pinned by digest" in digest_warning("nvidia/cuda:12.8.1-base-ubuntu24.04")


def test_connect_failure_is_one_line_with_hint(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(EngineUnavailable) as exc:
        connect(timeout=2)
    msg = str(exc.value)
    assert "\n" not in msg and f"DOCKER_HOST=unix://{tmp_path}/nothing.sock" in msg
    assert "scripts/docker-engine.sh" in msg


# -- command ----------------------------------------------------------------------------------------------------
def _invoke(args):
    from imagebuild.cli import cli

    return CliRunner().invoke(cli, args, standalone_mode=False)


def test_build_command_bad_ca_path_is_a_clear_input_error(tmp_path):
    from imagebuild.errors import UsageError

    res = _invoke(["build", "--matrix", "x.yaml", "--ca-cert", str(tmp_path / "nope.pem")])
    assert isinstance(res.exception, UsageError) and res.exception.exit_code == 2
    assert str(res.exception) == f"--ca-cert {tmp_path / 'nope.pem'}: no such file"
    bad = tmp_path / "bad.pem"
    bad.write_text("not a cert")
    res = _invoke(["build", "--matrix", "x.yaml", "--ca-cert", str(bad)])
    assert str(res.exception) == f"--ca-cert {bad}: holds no PEM certificate (no '-----BEGIN CERTIFICATE-----' block)"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")  # a key alone is no CA file
    res = _invoke(["build", "--matrix", "x.yaml", "--ca-cert", str(bad)])
    assert "holds no PEM certificate" in str(res.exception) and "\n" not in str(res.exception)


def test_build_command_help_lists_options():
    res = CliRunner().invoke(__import__("imagebuild.cli", fromlist=["cli"]).cli, ["build", "--help"])
    assert res.exit_code == 0
    for opt in ("--only", "--force", "--jobs", "--keep-going", "--plain", "--ca-cert", "--wheelhouse",
                "--torch-index-url", "--log-dir", "--report-dir", "--test", "--push", "--registry"):
        assert opt in res.output


def test_pull_when_missing_by_digest_and_warn_without_digest():
    from _fake_engine import FakeEngine

    from imagebuild.builder.pull import ensure_pulled

    engine = FakeEngine()
    engine.pull_streams.append([{"status": "Pulling from library/ubuntu"}, {"status": "Digest: sha256:abc"}])
    warnings: list[str] = []
    lines: list[str] = []
    pinned = "ubuntu:24.04@sha256:" + "b" * 64
    image_id = ensure_pulled(engine, pinned, warn=warnings.append, on_line=lines.append)
    assert image_id == engine.image_id(pinned) and image_id is not None
    assert engine.pulls == [("ubuntu", "sha256:" + "b" * 64, None)] and warnings == []
    assert lines == ["Pulling from library/ubuntu", "Digest: sha256:abc"]
    assert ensure_pulled(engine, pinned) == image_id and len(engine.pulls) == 1  # there now: not pulled again
    ensure_pulled(engine, "nvidia/cuda:12.8.1-base-ubuntu24.04", warn=warnings.append)
    assert engine.pulls[1][:2] == ("nvidia/cuda", "12.8.1-base-ubuntu24.04") and "not pinned by digest" in warnings[0]


def test_pull_error_in_stream_under_http_200_fails():
    from _fake_engine import FakeEngine

    from imagebuild.builder.pull import PullError, ensure_pulled

    engine = FakeEngine()
    engine.pull_streams.append([{"status": "Pulling"}, {"errorDetail": {"message": "manifest unknown"},
                                                       "error": "manifest unknown"}])
    with pytest.raises(PullError, match="pulling base image ubuntu:99.04@sha256:c+ failed: manifest unknown "
                                        r"\(offline alternative: base_image: bootstrap\)"):
        ensure_pulled(engine, "ubuntu:99.04@sha256:" + "c" * 64)
    assert engine.image_id("ubuntu:99.04@sha256:" + "c" * 64) is None
