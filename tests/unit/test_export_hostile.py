"""Hostile and damaged input to `imagebuild export` (issue 25): the unpacker keeps every write and every link inside
its scratch tree whatever names and links a tar stream holds (a property test over hostile members, plus the cases
that escaped before), and `export --check` proves a .sqsh can be unpacked and matches its sidecar, with real
squashfs-tools: every block decompressed, a compressor a kernel mounts, a sidecar that holds a matching sha256, and
special files refused without blocking."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from imagebuild.export.squashfs import check, sidecar
from imagebuild.export.unpack import UnpackError, unpack
from imagebuild.files import sha256_file

needs_squashfs = pytest.mark.skipif(not shutil.which("mksquashfs") or not shutil.which("unsquashfs"),
                                    reason="squashfs-tools not installed (scripts/system-deps.sh)")
ROOT = Path(__file__).resolve().parents[2]


# -- the unpacker ------------------------------------------------------------------------------------------------

def _tar(members: list[tuple[str, bytes, str, bytes]]) -> bytes:
    """A tar stream of (name, type, linkname, data) members, in order, names exactly as given."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, link, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode, info.mtime = kind, link, 0o755 if kind == tarfile.DIRTYPE else 0o644, 9
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return buf.getvalue()


def _snapshot(folder: Path) -> dict[str, tuple[int, int, int, bytes | str | None]]:
    """Everything under `folder` (not following links): mode, link count, owner, content or link target."""
    out: dict[str, tuple[int, int, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st_ = os.lstat(path)
            body: bytes | str | None = None
            if stat.S_ISLNK(st_.st_mode):
                body = os.readlink(path)
            elif stat.S_ISREG(st_.st_mode):
                body = Path(path).read_bytes()
            out[os.path.relpath(path, folder)] = (st_.st_mode, st_.st_nlink, st_.st_uid, body)
    st_ = os.lstat(folder)
    out["."] = (st_.st_mode, st_.st_nlink, st_.st_uid, None)
    return out


def _unpack_hostile(data: bytes, scratch: Path) -> tuple[Path, Path]:
    """Unpack `data` into scratch/root with scratch/outside (a victim file, a folder) beside it; returns both."""
    outside = scratch / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "victim").write_bytes(b"precious\n")
    os.chmod(outside / "victim", 0o600)
    root = scratch / "root"
    root.mkdir()
    with contextlib.suppress(UnpackError, OSError, tarfile.TarError):
        unpack([data], root)
    return root, outside


def test_a_hard_link_through_a_symlinked_folder_never_reaches_outside(tmp_path):
    """Failed before: the link reached outside/victim through `evil/`, and the file member `x` rewrote it."""
    outside = tmp_path / "outside"
    data = _tar([("evil", tarfile.SYMTYPE, str(outside), b""), ("x", tarfile.LNKTYPE, "evil/victim", b""),
                 ("x", tarfile.REGTYPE, "", b"pwned\n")])
    root, outside = _unpack_hostile(data, tmp_path)
    assert (outside / "victim").read_bytes() == b"precious\n" and os.lstat(outside / "victim").st_nlink == 1
    with pytest.raises(UnpackError, match="outside the image's tree"):
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        unpack([data], fresh)


def test_a_hard_link_to_a_symlink_links_the_link_not_its_target(tmp_path):
    """Failed before: os.link followed `s` to outside/victim; the next member `h` then truncated and rewrote it."""
    outside = tmp_path / "outside"
    data = _tar([("s", tarfile.SYMTYPE, str(outside / "victim"), b""), ("h", tarfile.LNKTYPE, "s", b""),
                 ("h", tarfile.REGTYPE, "", b"pwned\n"), ("ok", tarfile.REGTYPE, "", b"fine\n")])
    root, outside = _unpack_hostile(data, tmp_path)
    assert (outside / "victim").read_bytes() == b"precious\n" and os.lstat(outside / "victim").st_nlink == 1
    assert (root / "h").read_bytes() == b"pwned\n" and (root / "ok").read_bytes() == b"fine\n"
    assert os.readlink(root / "s") == str(outside / "victim")  # the image's own absolute link, kept as data


def test_a_file_over_a_planted_symlink_replaces_the_link(tmp_path):
    data = _tar([("etc", tarfile.DIRTYPE, "", b""), ("etc/passwd", tarfile.SYMTYPE, str(tmp_path / "outside/victim"),
                                                    b""),
                 ("etc/passwd", tarfile.REGTYPE, "", b"root:x:0:0\n")])
    root, outside = _unpack_hostile(data, tmp_path)
    assert (outside / "victim").read_bytes() == b"precious\n"


_PARTS = st.sampled_from(["a", "b", "s", "..", ".", "", "outside", "victim"])
_NAMES = st.lists(_PARTS, min_size=1, max_size=4).map("/".join)


@st.composite
def _members(draw: st.DrawFn) -> list[tuple[str, bytes, str, bytes]]:
    """Hostile members: names with `..`, `.` and empty parts, symbolic links to the victim, to the outside folder, up
    and out (`../..`), to `/`, and hard links to any of those names, in any order, names repeated."""
    links = st.one_of(_NAMES, st.sampled_from(["{outside}", "{outside}/victim", "{outside}/dir", "/", "..", "../..",
                                               "../outside", "../outside/victim", "."]))
    out = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE]))
        out.append((draw(_NAMES), kind, draw(links) if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else "",
                    b"pwned\n" if kind == tarfile.REGTYPE else b""))
    return out


@settings(max_examples=int(os.environ.get("IMAGEBUILD_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_members())
@example([("a", b"5", "", b""), ("a", b"2", "a", b"")])  # found by hypothesis: RecursionError in tarfile
def test_property_no_hostile_tar_writes_outside_its_tree(members):
    """Whatever the members, the unpack either refuses (UnpackError, one line) or writes only inside its tree:
    the folder beside it (a victim file, a folder) keeps every name, byte, mode, owner and link count."""
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        outside = scratch / "outside"
        data = _tar([(n, k, link.replace("{outside}", str(outside)), d) for n, k, link, d in members])
        (outside / "dir").mkdir(parents=True)
        (outside / "victim").write_bytes(b"precious\n")
        before = _snapshot(outside)
        siblings = sorted(p.name for p in scratch.iterdir())
        root = scratch / "root"
        root.mkdir()
        with contextlib.suppress(UnpackError, tarfile.TarError, OSError):
            unpack([data], root)
        assert _snapshot(outside) == before
        assert sorted(p.name for p in scratch.iterdir()) == sorted([*siblings, "root"])


def test_a_link_over_a_folder_is_refused_in_one_line(tmp_path):
    """A folder `a`, then a link `a -> a`: tarfile could not make the link over the folder and recursed into the link's
    target without end (RecursionError, a traceback); now one UnpackError naming the member."""
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(UnpackError, match="'a': a file or link over a folder"):
        unpack([_tar([("a", b"5", "", b""), ("a", b"2", "a", b"")])], root)


# -- export --check ----------------------------------------------------------------------------------------------

def _sqsh(tmp_path: Path, name: str = "img.sqsh", comp: str = "gzip") -> Path:
    src = tmp_path / f"src-{name}"
    (src / "etc").mkdir(parents=True)
    (src / "etc" / "numbers").write_text("".join(f"{n}\n" for n in range(60_000)))  # compressible: real blocks
    (src / "hello").write_text("hello\n")
    dest = tmp_path / name
    subprocess.run(["mksquashfs", str(src), str(dest), "-noappend", "-no-progress", "-quiet", "-comp", comp],
                   check=True, stdout=subprocess.DEVNULL)
    dest.with_name(dest.name + ".sha256").write_text(f"{sha256_file(dest)}  {dest.name}\n")
    return dest


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


@needs_squashfs
def test_check_passes_a_whole_file_and_names_the_kernel_option(tmp_path):
    from imagebuild.export.squashfs import verify

    good = _sqsh(tmp_path)
    verdict = verify(good, sha256_of=sha256_file)
    assert verdict.problems == [] and verdict.sha256_verified and verdict.kernel_option == "CONFIG_SQUASHFS_ZLIB"
    res = _cli("export", "--check", str(good))
    assert res.returncode == 0 and "every block decompressed" in res.stdout and "sha256 matches" in res.stdout
    xz = _sqsh(tmp_path, "xz.sqsh", comp="xz")
    verdict = verify(xz, sha256_of=sha256_file)
    assert verdict.problems == [] and verdict.kernel_option == "CONFIG_SQUASHFS_XZ"
    assert "needs CONFIG_SQUASHFS_XZ" in _cli("export", "--check", str(xz)).stdout


@needs_squashfs
def test_check_finds_a_data_block_that_does_not_decompress(tmp_path):
    """Failed before: `unsquashfs -l` reads no data block, so the damaged file was called whole."""
    good = _sqsh(tmp_path)
    body = bytearray(good.read_bytes())
    body[2000:2008] = b"\xff" * 8  # inside the first compressed data block of etc/numbers
    bad = tmp_path / "bad.sqsh"
    bad.write_bytes(bytes(body))
    assert subprocess.run(["unsquashfs", "-l", str(bad)], stdout=subprocess.DEVNULL).returncode == 0
    problems = check(bad)
    assert len(problems) == 1 and "every inode, directory and data block" in problems[0]
    res = _cli("export", "--check", str(bad))
    assert res.returncode == 1 and res.stderr.count("error:") == 1 and "Traceback" not in res.stderr


@needs_squashfs
@pytest.mark.parametrize("comp_id, words", [(2, "lzma, which no kernel"), (9, "unknown (9), which no kernel")])
def test_check_refuses_a_compressor_no_kernel_mounts(tmp_path, comp_id, words):
    """Failed before for an unknown id with the 'data uncompressed' flag set: the compressor check was skipped."""
    body = bytearray(_sqsh(tmp_path).read_bytes())
    struct.pack_into("<H", body, 20, comp_id)
    struct.pack_into("<H", body, 24, struct.unpack_from("<H", body, 24)[0] | 0x0002)
    odd = tmp_path / "odd.sqsh"
    odd.write_bytes(bytes(body))
    problems = check(odd)
    assert len(problems) == 1 and words in problems[0]


@needs_squashfs
@pytest.mark.parametrize("content, words", [("", "holds no sha256 (empty"), ("not-a-digest  img.sqsh\n", "holds no sha256"),
                                            ("0" * 64 + "  img.sqsh\n", "differs from img.sqsh.sha256")])
def test_check_never_calls_a_bad_sidecar_verified(tmp_path, content, words):
    """Failed before for the empty and malformed sidecars (reported as verified)."""
    good = _sqsh(tmp_path)
    sidecar(good).write_text(content)
    problems = check(good, sha256_of=sha256_file)
    assert len(problems) == 1 and words in problems[0]
    res = _cli("export", "--check", str(good))
    assert res.returncode == 1 and res.stderr.count("error:") == 1


@needs_squashfs
@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_check_refuses_a_special_sidecar_without_blocking(tmp_path, kind):
    """Failed before: a folder sidecar was a traceback (IsADirectoryError); a FIFO blocked the check forever."""
    good = _sqsh(tmp_path)
    sidecar(good).unlink()
    if kind == "folder":
        sidecar(good).mkdir()
    else:
        os.mkfifo(sidecar(good))
    old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("the check blocked")))
    signal.alarm(20)
    try:
        problems = check(good, sha256_of=sha256_file)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert len(problems) == 1 and ("a folder" if kind == "folder" else "a FIFO") in problems[0]


def test_check_refuses_a_fifo_given_as_the_file(tmp_path):
    fifo = tmp_path / "pipe.sqsh"
    os.mkfifo(fifo)
    res = _cli("export", "--check", str(fifo))
    assert res.returncode == 1 and "a FIFO, not a squashfs file" in res.stderr and res.stderr.count("error:") == 1


def test_export_refuses_options_it_would_ignore_and_a_name_of_the_other_format(tmp_path):
    """Failed before: `--check` with `--format` ran the check and ignored the format; a docker-archive written under a
    .sqsh name went ahead (pyxis would then try to mount a tar)."""
    for args, words in ((["--check", str(tmp_path / "x.sqsh"), "--format", "docker-archive"], "--format"),
                        (["--check", str(tmp_path / "x.sqsh"), "--compression", "none"], "--compression"),
                        (["img:tag", "--format", "docker-archive", "-o", str(tmp_path / "a.sqsh")], "a squashfs name"),
                        (["img:tag", "-o", str(tmp_path / "a.tar")], "a docker-archive name"),
                        (["img:tag", "--format", "docker-archive", "--compression", "gzip", "-o",
                          str(tmp_path / "a.tar")], "--compression is for")):
        res = _cli("export", *args)
        assert res.returncode == 2 and words in res.stderr, (args, res.stderr)
        assert res.stderr.count("error:") == 1 and "Traceback" not in res.stderr


def test_export_of_a_matrix_image_refuses_an_unwritable_state_folder_before_the_engine(tmp_path):
    """Failed before: the engine was asked first (no engine here: exit 1 'no Docker engine'; with one, the whole export
    ran and then the record write failed)."""
    res = subprocess.run([sys.executable, "-m", "imagebuild", "export", "--matrix", str(ROOT / "images" / "cpu.yaml"),
                          "--only", "*runtime", "-o", str(tmp_path / "a.sqsh")], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                                          "IMAGEBUILD_STATE_DIR": "/proc/imagebuild-state",
                                          "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert res.returncode == 2 and "state folder (IMAGEBUILD_STATE_DIR) /proc/imagebuild-state" in res.stderr
    assert res.stderr.count("error:") == 1 and "Traceback" not in res.stderr
