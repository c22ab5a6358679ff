"""imagebuild/export: enroot's /etc files from an image config, the tar → squashfs path with the image's owners and
modes (real mksquashfs/unsquashfs on a tar made here; the engine is faked by the stream), reproducibility, `--check`
on truncated and altered copies, and the one-line errors for destinations."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from imagebuild.dates import image_source_date
from imagebuild.export import check, export_archive, export_squashfs
from imagebuild.export.enrootfiles import enroot_files, parse_environment, quote
from imagebuild.export.squashfs import mksquashfs_args, read_superblock, sidecar
from imagebuild.export.unpack import enroot_mode
from imagebuild.export.writer import ExportError

needs_squashfs = pytest.mark.skipif(not shutil.which("mksquashfs") or not shutil.which("unsquashfs"),
                                    reason="squashfs-tools not installed (scripts/system-deps.sh)")

INSPECT = {
    "Id": "sha256:" + "ab" * 32, "Created": "2026-11-02T03:04:05.123456Z", "Size": 10_000,
    "Config": {"Env": ["PATH=/opt/venv/bin:/usr/bin:/bin", "HOME=/home/ml", "X=a=b"], "WorkingDir": "/workspace",
               "Entrypoint": ["/usr/bin/tini", "--"], "Cmd": ["bash", "-c", "echo it's"],
               "Labels": {"org.opencontainers.image.title": "pytorch", "io.imagebuild.flavor": "runtime",
                          "io.imagebuild.source-date-epoch": "1700000000", "multi": "a\nb"},
               "Volumes": {"/data": {}, "/cache": {}}},
}


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        def add(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, uid=0, gid=0, link=""):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid, info.mtime, info.linkname = kind, mode, uid, gid, 99, link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            t.addfile(info, io.BytesIO(data) if data else None)

        add(".dockerenv")
        add("dev", tarfile.DIRTYPE, mode=0o755)
        add("dev/console", mode=0o600)
        add("etc", tarfile.DIRTYPE, mode=0o755)
        add("etc/shadow", data=b"root:*:1::::::\n", mode=0o640, gid=42)
        add("etc/environment", data=b"OLD=1\n")
        add("home", tarfile.DIRTYPE, mode=0o755)
        add("home/ml", tarfile.DIRTYPE, mode=0o770, uid=1000, gid=0)
        add("home/ml/a file \"q\"", data=b"hi", mode=0o664, uid=1000)
        add("usr/bin", tarfile.DIRTYPE, mode=0o555)
        add("usr/bin/sudo", data=b"#!/bin/sh\n", mode=0o4755)
        add("usr/bin/sudo-again", tarfile.LNKTYPE, link="usr/bin/sudo")
        add("usr/bin/python", tarfile.SYMTYPE, link="/opt/venv/bin/python3")
        add("locked", data=b"x", mode=0o000)
    return buf.getvalue()


def _opener(data: bytes):
    @contextlib.contextmanager
    def open_filesystem():
        yield (data[i:i + 4096] for i in range(0, len(data), 4096))

    return open_filesystem


def test_enroot_files_follow_the_config():
    made = enroot_files(INSPECT, "dockerd://sha256:abc")
    assert made.workdir == "/workspace"
    assert made.files["etc/environment"] == "PATH=/opt/venv/bin:/usr/bin:/bin\nHOME=/home/ml\nX=a=b\n"
    assert parse_environment(made.files["etc/environment"])["X"] == "a=b"
    assert made.files["etc/fstab"].splitlines() == [
        "${ENROOT_ROOTFS}/cache /cache none x-create=dir,bind,rw,nosuid,nodev",
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev"]
    rc = made.files["etc/rc"].splitlines()
    assert rc[0] == "# enroot-provenance: dockerd://sha256:abc"
    assert "# multi a b" in rc and "# io.imagebuild.flavor runtime" in rc
    assert 'cd "/workspace" && unset OLDPWD || exit 1' in rc
    assert "    exec '/usr/bin/tini' '--' \"$@\"" in rc
    assert "    exec '/usr/bin/tini' '--' 'bash' '-c' 'echo it'\\''s'" in rc


def test_enroot_files_without_entrypoint_or_cmd_start_a_shell():
    rc = enroot_files({"Id": "x", "Config": {}}, "dockerd://x").files["etc/rc"]
    assert "    exec '/bin/sh'" in rc and '    exec "$@"' in rc and 'cd "/"' in rc


def test_quote_round_trips_through_sh():
    word = "a 'b' $HOME \"c\""
    out = subprocess.run(["sh", "-c", f"printf %s {quote(word)}"], capture_output=True, text=True).stdout
    assert out == word


def test_enroot_mode_is_what_enroot_import_leaves():
    assert enroot_mode(0o000, False) == 0o400
    assert enroot_mode(0o4755, False) == 0o4755
    assert enroot_mode(0o555, True) == 0o755
    assert enroot_mode(0o011, False) == 0o511


def test_source_epoch_prefers_the_label_then_created():
    assert image_source_date(INSPECT) == 1_700_000_000
    assert image_source_date({"Created": "2026-11-02T03:04:05.5Z", "Config": {}}) == 1793588645
    assert image_source_date({"Created": "garbage"}) == 0


def test_mksquashfs_compression_choices():
    args = mksquashfs_args(Path("r"), Path("o"), Path("p"), 5, "none", False) if shutil.which("mksquashfs") else []
    if args:
        assert "-noD" in args and "-comp" not in args and "-no-xattrs" in args and args.count("5") == 2
    with pytest.raises(ValueError, match="valid choices: gzip, none"):
        mksquashfs_args(Path("r"), Path("o"), Path("p"), 5, "zstd", False)


@needs_squashfs
def test_squashfs_keeps_owners_modes_and_is_reproducible(tmp_path):
    data = _tar()
    one = export_squashfs(_opener(data), INSPECT, tmp_path / "one.sqsh")
    two = export_squashfs(_opener(data), INSPECT, tmp_path / "two.sqsh")
    assert one.sha256 == two.sha256 and one.size == (tmp_path / "one.sqsh").stat().st_size
    assert sidecar(tmp_path / "one.sqsh").read_text() == f"{one.sha256[7:]}  one.sqsh\n"
    assert not list(tmp_path.glob(".*partial"))
    listing = subprocess.run(["unsquashfs", "-lln", str(tmp_path / "one.sqsh")], capture_output=True,
                             text=True).stdout
    rows = {line.split(" squashfs-root", 1)[1].split(" -> ")[0]: line.split()[:2]
            for line in listing.splitlines() if " squashfs-root" in line}
    assert rows["/home/ml"] == ["drwxrwx---", "1000/0"]
    assert rows['/home/ml/a file "q"'] == ["-rw-rw-r--", "1000/0"]
    assert rows["/etc/shadow"] == ["-rw-r-----", "0/42"]
    assert rows["/usr/bin/sudo"] == ["-rwsr-xr-x", "0/0"]
    assert rows["/usr/bin"][0] == "drwxr-xr-x"  # u+w for directories, as enroot's import leaves them
    assert rows["/locked"][0] == "-r--------"
    assert rows["/usr/bin/python"][0].startswith("l")
    assert rows["/workspace"] == ["drwxr-xr-x", "0/0"]  # WORKDIR created, as enroot does
    assert "/.dockerenv" not in rows and "/dev/console" not in rows and "/dev" in rows
    assert "1700000000" not in listing and "2023-11-14" in listing  # every time the source date
    env = subprocess.run(["unsquashfs", "-cat", str(tmp_path / "one.sqsh"), "etc/environment"],
                         capture_output=True, text=True).stdout
    assert env.startswith("PATH=/opt/venv/bin:") and "OLD=1" not in env
    sb = read_superblock((tmp_path / "one.sqsh").read_bytes()[:96])
    assert sb is not None and sb.compressor == "gzip" and sb.mkfs_time == 1_700_000_000
    assert check(tmp_path / "one.sqsh") == []


@needs_squashfs
def test_check_finds_truncated_altered_and_foreign_files(tmp_path):
    from imagebuild.export.writer import sha256_file

    good = tmp_path / "good.sqsh"
    export_squashfs(_opener(_tar()), INSPECT, good)
    body = good.read_bytes()
    sb = read_superblock(body[:96])
    assert sb is not None
    cut = tmp_path / "cut.sqsh"
    cut.write_bytes(body[: sb.bytes_used - 10])
    assert any("truncated" in p for p in check(cut))
    altered = tmp_path / "altered.sqsh"
    altered.write_bytes(body[:200] + b"\xff" * 16 + body[216:])
    shutil.copy(sidecar(good), sidecar(altered))
    sidecar(altered).write_text(sidecar(good).read_text().replace("good.sqsh", "altered.sqsh"))
    assert any("differs" in p for p in check(altered, sha256_of=sha256_file))
    text = tmp_path / "notes.sqsh"
    text.write_text("hello")
    assert check(text) == [f"{text}: not a squashfs (no squashfs superblock at the start; 5 bytes)"]
    assert "cannot read" in check(tmp_path / "missing.sqsh")[0]


def test_destination_errors_before_any_work(tmp_path):
    opened = []

    @contextlib.contextmanager
    def never():
        opened.append(1)
        yield iter(())

    (tmp_path / "taken.sqsh").write_bytes(b"x")
    for dest, words in ((tmp_path / "taken.sqsh", "already exists (--force replaces it)"),
                        (tmp_path / "nowhere" / "x.sqsh", "no such directory"),
                        (tmp_path, "is a directory")):
        with pytest.raises(ExportError, match=words.replace("(", r"\(").replace(")", r"\)")):
            export_squashfs(never, INSPECT, dest)
    assert opened == []


def test_disk_full_is_one_line_and_leaves_nothing(tmp_path):
    def stream():
        yield b"x" * 10
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".img.tar.partial"))

    with pytest.raises(ExportError, match="disk full"):
        export_archive(stream(), INSPECT, tmp_path / "img.tar")
    assert list(tmp_path.iterdir()) == []


def test_archive_is_written_whole_with_its_sha256(tmp_path):
    import hashlib

    from _archives import classic, tar_of

    image_id, files = classic()
    data = tar_of(files)
    res = export_archive(iter([data[:700], data[700:]]), {**INSPECT, "Id": image_id}, tmp_path / "img.tar")
    written = (tmp_path / "img.tar").read_bytes()
    assert res.format == "docker-archive" and res.sha256 == f"sha256:{hashlib.sha256(written).hexdigest()}"
    with tarfile.open(tmp_path / "img.tar") as t:
        assert {m.name: t.extractfile(m).read() for m in t if m.isreg()}.keys() == files.keys()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})


def test_cli_check_and_usage_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.sqsh"
    bad.write_bytes(b"\0" * 200)
    for args, code, words in ((["--check", str(bad)], 1, "not a squashfs"),
                              (["img:tag"], 2, "--output"),
                              (["--only", "x", "-o", str(tmp_path / "a.sqsh")], 2, "go with --matrix"),
                              (["img:tag", "-o", str(bad)], 1, "already exists"),
                              (["img:tag", "--platform", "linux/s390x", "-o", str(tmp_path / "b.sqsh")], 2,
                               "valid choices: linux/amd64, linux/arm64"),
                              (["--check", str(bad), "--platform", "arm64"], 2, "--platform")):
        res = _cli("export", *args)
        assert res.returncode == code and words in res.stderr, res.stderr
        assert res.stderr.count("error:") == 1 and "Traceback" not in res.stderr


def test_members_that_escape_the_tree_are_refused(tmp_path):
    from imagebuild.export.unpack import UnpackError, unpack

    outside = tmp_path / "outside"
    outside.mkdir()
    for members in ((("evil", tarfile.SYMTYPE, str(outside)), ("evil/file", tarfile.REGTYPE, "")),
                    (("a/../../x", tarfile.REGTYPE, ""),)):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name, kind, link in members:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, link
                t.addfile(info)
        root = tmp_path / f"root{len(members)}"
        root.mkdir()
        with pytest.raises(UnpackError):
            unpack([buf.getvalue()], root)
    assert list(outside.iterdir()) == []


def test_pick_one_narrows_by_platform_and_names_the_platforms():
    import dataclasses

    from _push_fakes import make_image

    from imagebuild.errors import UsageError
    from imagebuild.models import Plan
    from imagebuild.pipeline.selection import pick_one

    amd = make_image(flavor="base")
    arm = dataclasses.replace(amd, id=amd.id.replace("-base", "-arm64-base"),
                              tag=amd.tag.replace("-base", "-arm64-base"),
                              variant=dataclasses.replace(amd.variant, platform="linux/arm64"))
    plan = Plan("m.yaml", [amd, arm])
    assert pick_one(plan, None, "base", "m.yaml", "linux/arm64") is arm
    assert pick_one(plan, None, "base", "m.yaml", "linux/amd64") is amd
    with pytest.raises(UsageError, match=r"matches 2 images; narrow with --only/--flavor/--platform: .*\(linux/arm64\)"):
        pick_one(plan, None, "base", "m.yaml")
