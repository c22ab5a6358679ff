"""oci/skopeo.py fetch_archive: the two skopeo copies that bring a zstd image to an engine that cannot inflate zstd
(registry -> decompressed `dir:` -> docker-archive), credentials only in a 0600 auth file that is gone afterwards,
and skopeo's own message as the one error. The real copies run in tests/integration/test_record_and_cache.py."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from imagebuild.oci import RegistryAuth
from imagebuild.oci.skopeo import CopyError, auth_from_sdk, fetch_archive

REF = "reg.example:5000/ml/runtime@sha256:" + "a" * 64


def test_two_copies_credentials_in_a_private_file_never_in_the_argv(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    modes: list[int] = []

    def run(argv: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "--src-authfile" in argv:
            authfile = Path(argv[argv.index("--src-authfile") + 1])
            modes.append(stat.S_IMODE(authfile.stat().st_mode))
            assert json.loads(authfile.read_text())["auths"]["reg.example:5000"]["auth"]
        return subprocess.CompletedProcess(argv, 0, "", "")

    archive = fetch_archive(REF, RegistryAuth("reg.example:5000", "alice", "pw-Secret-7"), tmp_path,
                            plain_http=True, run=run)
    assert archive == tmp_path / "image.tar"
    first, second = calls
    assert first[-2:] == [f"docker://{REF}", f"dir:{tmp_path / 'layout'}"]
    assert "--dest-decompress" in first and "--src-tls-verify=false" in first
    assert second[-2:] == [f"dir:{tmp_path / 'layout'}", f"docker-archive:{archive}"]
    assert modes == [0o600]
    assert not any("pw-Secret-7" in a for argv in calls for a in argv)
    assert not (tmp_path / "auth.json").exists() and not (tmp_path / "layout").exists()


def test_a_failed_copy_is_one_redacted_error_and_leaves_no_auth_file(tmp_path: Path) -> None:
    def run(argv: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", 'time="x" level=fatal msg="reading manifest: '
                                           'https://bob:hunter2@reg.example:5000/v2/ unauthorized"\n')

    with pytest.raises(CopyError) as err:
        fetch_archive(REF, RegistryAuth("reg.example:5000"), tmp_path, plain_http=False, run=run)
    assert str(err.value).startswith(REF) and "unauthorized" in str(err.value) and "hunter2" not in str(err.value)
    assert not (tmp_path / "auth.json").exists()


def test_auth_from_the_engine_auth_config() -> None:
    auth = auth_from_sdk("reg:5000", {"username": "u", "password": "p", "serveraddress": "reg:5000"})
    assert (auth.registry, auth.username, auth.password) == ("reg:5000", "u", "p")
    assert auth_from_sdk("reg:5000", None).anonymous
