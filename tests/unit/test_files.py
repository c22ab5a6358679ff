"""imagebuild.files: bounded reads, CA certificate blocks, output folders checked before anything builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import cli
from imagebuild.errors import EXIT_BAD_INPUT
from imagebuild.files import (
    FileProblem,
    certificate_blocks,
    check_output_dir,
    read_bounded,
    read_bounded_text,
)

CERT = b"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY/PuoAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n"


def test_certificate_blocks_keep_only_certificates(tmp_path):
    f = tmp_path / "proxy.pem"
    f.write_bytes(b"Bag Attributes\n  friendlyName: proxy\n" + KEY + CERT.replace(b"\n", b"\r\n") + b"junk" + CERT)
    assert certificate_blocks(f) == CERT + CERT
    empty = tmp_path / "empty.pem"
    empty.write_bytes(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n" + KEY)
    with pytest.raises(FileProblem, match="holds no PEM certificate"):
        certificate_blocks(empty)
    with pytest.raises(FileProblem, match="cannot read the file"):
        certificate_blocks(tmp_path / "missing.pem")


def test_bounded_reads(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * 101)
    assert read_bounded(f, "thing", limit=101) == b"x" * 101
    with pytest.raises(FileProblem, match=f"^{f}: larger than 100 B, not a thing"):
        read_bounded(f, "thing", limit=100)
    f.write_bytes(b"\xc3\x28")
    with pytest.raises(FileProblem, match="the thing is not UTF-8 text"):
        read_bounded_text(f, "thing")
    with pytest.raises(FileProblem, match="is a folder"):
        read_bounded(tmp_path, "thing")


def test_check_output_dir(tmp_path):
    assert check_output_dir(tmp_path / "a" / "b", "--report-dir") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir() and list((tmp_path / "a" / "b").iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FileProblem, match=f"^--report-dir {blocker}: exists and is not a folder"):
        check_output_dir(blocker, "--report-dir")
    with pytest.raises(FileProblem, match=f"^--state-dir {blocker / 'sub'}: cannot write there"):
        check_output_dir(blocker / "sub", "--state-dir")
    with pytest.raises(FileProblem, match="cannot write there"):
        check_output_dir(Path("/proc/imagebuild-bogus"), "--report-dir")


@pytest.mark.parametrize("option", ["--report-dir", "--state-dir", "--log-dir"])
def test_build_checks_output_folders_before_it_connects(tmp_path, monkeypatch, option):
    """A bogus output folder used to be found only after the whole build, writing the SBOM."""
    import imagebuild.engine

    def no_engine(*a, **k):
        raise AssertionError("connected to an engine before checking the output folders")

    monkeypatch.setattr(imagebuild.engine, "connect", no_engine)
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = CliRunner().invoke(cli, ["build", "--matrix", "cpu.yaml", option, str(blocker / "out")],
                           standalone_mode=False)
    assert isinstance(r.exception, FileProblem), r.exception
    assert r.exception.exit_code == EXIT_BAD_INPUT
    assert str(r.exception).startswith(f"{option} {blocker / 'out'}: cannot write there")
