"""The engine's CLI door (engine/cli.py): the binary it runs, the status it returns instead of raising, the one
error line it reads — against a tiny stand-in `docker` script (no engine)."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from imagebuild.engine import cli

FAKE = r'''
import os, sys, time
args = sys.argv[1:]
if args[:1] == ["version"]:
    if os.environ.get("FAKE_CALLS"):
        open(os.environ["FAKE_CALLS"], "a").write("version\n")
    print("26.1.5+dfsg1 " + os.environ.get("DOCKER_HOST", "-"))
elif args[:1] == ["slow"]:
    time.sleep(5)
elif args[:2] == ["image", "inspect"]:
    print(os.environ.get("FAKE_ID", "not an id"))
else:
    sys.stderr.write("some progress\nError response from daemon: No such image: " + args[-1] + "\n\n")
    sys.exit(1)
'''


@pytest.fixture()
def fake(tmp_path, monkeypatch):
    script = tmp_path / "docker"
    script.write_text(f"#!{sys.executable}\n{FAKE}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("IMAGEBUILD_DOCKER_CLI", str(script))
    return script


def test_a_call_reaches_the_engine_the_environment_names(fake, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/tmp/x/docker.sock")
    out = cli.engine_version()
    assert out.ok and out.out == "26.1.5+dfsg1 unix:///var/tmp/x/docker.sock"
    assert out.argv[0] == str(fake)


def test_a_failed_call_is_a_status_with_docker_s_last_line(fake):
    out = cli.tag("sha256:" + "ab" * 32, "imagebuild-pin:x")
    assert not out.ok and out.returncode == 1
    assert out.reason == "Error response from daemon: No such image: imagebuild-pin:x"


def test_no_binary_and_no_answer_are_statuses_too(fake, monkeypatch):
    slow = cli.run(["slow"], timeout=0.5)
    assert slow.returncode == cli.TIMED_OUT and slow.reason == "docker slow did not answer within 0.5 s"
    monkeypatch.setenv("IMAGEBUILD_DOCKER_CLI", os.devnull + "/docker")
    missing = cli.engine_version()
    assert missing.returncode == cli.NOT_RUN and missing.reason.startswith(f"{os.devnull}/docker: ")


def test_image_id_only_for_an_id(fake, monkeypatch):
    assert cli.image_id("x:1") is None  # the CLI answered, but not with an image ID
    monkeypatch.setenv("FAKE_ID", "sha256:" + "cd" * 32)
    assert cli.image_id("x:1") == "sha256:" + "cd" * 32


def test_a_prefetched_call_is_made_once_and_only_for_the_same_engine(fake, monkeypatch, tmp_path):
    calls = tmp_path / "calls"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setenv("DOCKER_HOST", "unix:///a.sock")
    cli.prefetch(cli.ENGINE_VERSION)
    assert cli.engine_version().out == "26.1.5+dfsg1 unix:///a.sock"
    assert calls.read_text() == "version\n"  # the prefetched process answered: not run again
    assert cli.engine_version().ok and calls.read_text() == "version\n" * 2  # taken once: the next call runs
    cli.prefetch(cli.ENGINE_VERSION)
    monkeypatch.setenv("DOCKER_HOST", "unix:///b.sock")  # another engine: the prefetched answer is not its
    assert cli.engine_version().out == "26.1.5+dfsg1 unix:///b.sock"
    monkeypatch.setenv("DOCKER_HOST", "unix:///a.sock")
    assert cli.engine_version().out == "26.1.5+dfsg1 unix:///a.sock"  # (the one prefetched for a.sock)
