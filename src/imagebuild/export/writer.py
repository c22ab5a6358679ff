"""One export, start to end: the destination checked before any work, the image's files read from a container that
never starts, enroot's /etc files added, packed beside the destination under a hidden name and renamed into place
only when whole (a crash, Ctrl-C or a full disk never leaves a half-written `.sqsh` under the final name), then the
sha256 written beside it (`FILE.sha256`, for `sha256sum -c` and `export --check`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imagebuild.dates import image_source_date
from imagebuild.engine.rootfs import EngineReadError, signals_deferred
from imagebuild.errors import ImagebuildError
from imagebuild.export import squashfs
from imagebuild.export.archive import ArchiveError, copy_checked
from imagebuild.export.enrootfiles import enroot_files
from imagebuild.export.unpack import UnpackError, add_directory, add_file, pseudo_definitions, unpack
from imagebuild.files import sha256_file
from imagebuild.units import format_size

FORMATS = ("squashfs", "docker-archive")


class ExportError(ImagebuildError):
    """An export that cannot be made (one line: which file, why)."""


@dataclass(frozen=True)
class ExportResult:
    path: str
    format: str
    sha256: str
    size: int
    seconds: float
    image_id: str
    compression: str | None = None
    image_size: int | None = None  # the engine's size of the image (unpacked)

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def check_destination(dest: Path, force: bool) -> None:
    """Before any work: the folder exists and takes files, the name is free (or --force)."""
    if dest.is_dir():
        raise ExportError(f"{dest}: is a directory; give a file name (e.g. {dest / 'image.sqsh'})")
    if (dest.exists() or dest.is_symlink()) and not force:
        raise ExportError(f"{dest}: already exists (--force replaces it)")
    parent = dest.parent
    if not parent.is_dir():
        raise ExportError(f"{parent}: no such directory for {dest.name}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"{parent}: cannot write there (permission denied)")


def _os_error(exc: OSError, what: str) -> ExportError:
    if exc.errno == errno.ENOSPC:
        return ExportError(f"{what}: disk full ({exc.filename or 'no space left on device'}); nothing was left "
                           "under the final name")
    return ExportError(f"{what}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else ""))


class Progress:
    """One updating stderr line on a terminal (bytes so far, the phase); silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0

    def bytes(self, phase: str, n: int) -> None:
        now = time.monotonic()
        if self.enabled and now - self._last >= 0.5:
            self._last = now
            sys.stderr.write(f"\r{phase}: {format_size(n)}   ")
            sys.stderr.flush()

    def done(self, phase: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{phase}: done{' ' * 20}\n")
            sys.stderr.flush()


def _aside(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.partial")


def _install(aside: Path, dest: Path) -> str:
    """Rename the whole file into place and write its sidecar; its sha256 hex."""
    digest = sha256_file(aside)
    os.chmod(aside, 0o644)
    os.replace(aside, dest)
    side = squashfs.sidecar(dest)
    tmp = _aside(side)
    tmp.write_text(f"{digest}  {dest.name}\n", encoding="utf-8")
    os.replace(tmp, side)
    return digest


def export_squashfs(open_filesystem: Callable[[], contextlib.AbstractContextManager[Iterable[bytes]]],
                    inspect: dict[str, Any], dest: Path, *, compression: str = "gzip", force: bool = False,
                    work_dir: Path | None = None, progress: Progress | None = None) -> ExportResult:
    """The image (its inspect data; its files from `open_filesystem()`) as an enroot `.sqsh` at `dest`."""
    progress = progress or Progress(False)
    check_destination(dest, force)
    squashfs.tool("mksquashfs")
    started = time.monotonic()
    image_id = str(inspect["Id"])
    aside = _aside(dest)
    try:
        scratch = Path(tempfile.mkdtemp(prefix="imagebuild-export-", dir=work_dir))
    except OSError as exc:
        raise _os_error(exc, f"{work_dir or tempfile.gettempdir()}: scratch folder") from None
    try:
        root = scratch / "rootfs"
        root.mkdir()
        with open_filesystem() as chunks:
            unpacked = unpack(chunks, root, on_bytes=lambda n: progress.bytes("reading the image's files", n))
        progress.done("reading the image's files")
        made = enroot_files(inspect, f"dockerd://{image_id}")
        add_directory(unpacked, made.workdir)
        for rel, text in made.files.items():
            add_file(unpacked, rel, text)
        pseudo = scratch / "owners.pseudo"
        pseudo.write_text(pseudo_definitions(unpacked), encoding="utf-8")
        squashfs.pack(root, aside, pseudo, image_source_date(inspect), compression, progress.enabled)
        digest = _install(aside, dest)
    except OSError as exc:
        raise _os_error(exc, str(dest)) from None
    except (UnpackError, squashfs.SquashfsError, EngineReadError, tarfile.TarError) as exc:
        raise ExportError(f"{dest}: {exc}") from None
    finally:
        with signals_deferred():  # a signal now still gets the scratch tree and the .partial file removed
            with contextlib.suppress(OSError):
                aside.unlink()
            shutil.rmtree(scratch, ignore_errors=True)
    return ExportResult(path=str(dest.resolve()), format="squashfs", sha256=f"sha256:{digest}",
                        size=dest.stat().st_size, seconds=round(time.monotonic() - started, 1), image_id=image_id,
                        compression=compression, image_size=inspect.get("Size"))


def export_archive(stream: Iterable[bytes], inspect: dict[str, Any], dest: Path, *, name: str | None = None,
                   force: bool = False, progress: Progress | None = None) -> ExportResult:
    """`docker save` of the image at `dest` (a docker-archive for `apptainer build x.sif docker-archive:DEST`):
    `stream` is the save of the image ID inspected (`inspect["Id"]`), `name` the tag written into the archive;
    renamed into place only once the copy is checked to hold exactly that image (export/archive.py)."""
    progress = progress or Progress(False)
    check_destination(dest, force)
    started = time.monotonic()
    aside = _aside(dest)
    try:
        with open(aside, "wb") as f:
            copy_checked(stream, f, str(inspect["Id"]), name,
                         on_bytes=lambda n: progress.bytes("saving the image", n))
        progress.done("saving the image")
        digest = _install(aside, dest)
    except OSError as exc:
        raise _os_error(exc, str(dest)) from None
    except ArchiveError as exc:
        raise ExportError(f"{dest}: {exc}; nothing was written under that name") from None
    except EngineReadError as exc:
        raise ExportError(f"{dest}: {exc}") from None
    finally:
        with signals_deferred(), contextlib.suppress(OSError):
            aside.unlink()
    return ExportResult(path=str(dest.resolve()), format="docker-archive", sha256=f"sha256:{digest}",
                        size=dest.stat().st_size, seconds=round(time.monotonic() - started, 1),
                        image_id=str(inspect["Id"]), image_size=inspect.get("Size"))
