"""An image written to a registry BY DIGEST with skopeo (Debian's 1.9): compressed layers, no tag moved.

Two steps, so that a signer can sign the digest before any tag moves:
1. `prepare`: the archive the build kept for the image ID (engine/held.py: a BuildKit build's own export) sent as it
   is (push/asheld.py: no save, nothing compressed); else the engine's `docker save` of the image (through the store,
   so both engines work) into a private temporary folder, sent as it is when it already is the requested form
   (asheld.py again: the containerd store's zstd images), else each layer compressed once per content
   (push/compress.py: libzstd level 3 with OCI media types, or gzip -6 with Docker media types; a layer the cache already holds for its diff ID is reused, so an
   unchanged layer keeps its digest and costs no compression) into a skopeo `dir:` folder, with the engine's config
   bytes as they are (the pushed config digest stays the image's ID on the classic store, which the catalog, the
   record and the registry cache match images by). Not skopeo's `docker-daemon:` transport: skopeo 1.9 talks to the
   engine with API 1.22, which dockerd 26.1 refuses, and that transport buffers the same save stream anyway.
2. `send`: `skopeo copy --preserve-digests dir:FOLDER docker://NAME@DIGEST`: skopeo asks the registry for each blob
   and sends the ones it lacks, then the manifest by digest. Credentials go in an auth file (mode 0600 in a 0700
   folder, removed with it), never on a command line; skopeo's own retries are off (the caller retries with the one
   policy).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path

from imagebuild.engine import held
from imagebuild.engine.store import ImageStore
from imagebuild.engine.stream import EngineError
from imagebuild.oci import RegistryAuth
from imagebuild.oci.skopeo import (
    SKOPEO,
    CopyError,
    FormatRefused,
    auth_file_doc,
    refused_format,
    skopeo_message,
    skopeo_version,
    write_auth_file,
)
from imagebuild.push.asheld import as_held
from imagebuild.push.compress import LayerCache, LayerError, Prepared, compress_archive

__all__ = ["COMPRESSIONS", "CopyError", "FormatRefused", "Prepared", "Skopeo", "auth_file_doc",
           "refused_format", "skopeo_message", "skopeo_version"]

COMPRESSIONS = ("zstd", "gzip")
DEFAULT_COMPRESSION = "zstd"


class Skopeo:
    """prepare/send over one private temporary folder; `close()` removes it (layouts, archive, auth file)."""

    def __init__(self, store: ImageStore, *, binary: str = SKOPEO, log: Callable[[str], None] = lambda _m: None,
                 run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
                 cache: LayerCache | None = None) -> None:
        self.store = store
        self.cache = cache or LayerCache()
        self.binary = binary
        self.log = log
        self._run = run
        self._work: Path | None = None
        self._count = 0

    @property
    def work(self) -> Path:
        if self._work is None:
            self._work = Path(tempfile.mkdtemp(prefix="imagebuild-push-", dir=os.environ.get("IMAGEBUILD_PUSH_TMP")))
            self._work.chmod(0o700)
        return self._work

    def close(self) -> None:
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def _skopeo(self, args: list[str], what: str) -> None:
        try:
            out = self._run([self.binary, *args], capture_output=True, text=True, check=False)
        except OSError:
            skopeo_version(self.binary)  # names the package
            raise
        if out.returncode != 0:
            message = skopeo_message(out.stderr)
            raise CopyError(f"{what}: {message}")

    def prepare(self, image_id: str, compression: str) -> Prepared:
        """`image_id` (as the engine holds it) saved into a new `dir:` folder: its own manifest and blobs when they
        already are `compression` (push/asheld.py), else compressed layer by layer through the cache."""
        if compression not in COMPRESSIONS:
            raise CopyError(f"compression {compression!r}: choose one of {', '.join(COMPRESSIONS)}")
        archive, layout = self._paths()
        kept = self._from_kept(image_id, layout, compression)
        if kept is not None:
            return kept
        try:
            self._save(image_id, archive)
            return (as_held(archive, layout, compression, image_id)
                    or compress_archive(archive, layout, compression, self.cache))
        except (LayerError, tarfile.TarError, KeyError, ValueError) as exc:
            raise CopyError(f"{image_id[:19]}: the saved image cannot be compressed: {exc}") from None
        finally:
            archive.unlink(missing_ok=True)

    def _from_kept(self, image_id: str, layout: Path, compression: str) -> Prepared | None:
        """The archive the build kept for `image_id` (engine/held.py), sent as it is when it is that image in the
        requested form; a damaged one is dropped (the engine's save follows)."""
        kept = held.find(image_id)
        if kept is None:
            return None
        try:
            prepared = as_held(kept, layout, compression, image_id, exact=True, lazy=True)
        except (LayerError, tarfile.TarError, KeyError, ValueError, OSError) as exc:
            self._drop(kept, image_id, exc)
            prepared = None
        if prepared is None:
            shutil.rmtree(layout, ignore_errors=True)
            return None
        lazy = prepared.fill
        assert lazy is not None

        def fill(wanted: Collection[str]) -> None:
            """The kept archive's layers the push asks for; one of other bytes (or an archive gone since): the
            archive is dropped and the engine's save of the image fills the layout instead."""
            try:
                lazy(wanted)
            except (LayerError, tarfile.TarError, KeyError, ValueError, OSError) as exc:
                self._drop(kept, image_id, exc)
                self._fill_from_save(image_id, prepared, wanted)

        return replace(prepared, fill=fill)

    def _drop(self, kept: Path, image_id: str, why: Exception) -> None:
        self.log(f"{image_id[:19]}: the archive the build kept is not this image ({why}): saving it from the "
                 "engine instead")
        kept.unlink(missing_ok=True)

    def _fill_from_save(self, image_id: str, prepared: Prepared, wanted: Collection[str]) -> None:
        """`wanted` blobs of the engine's own save of `image_id` into `prepared`'s layout: it must be exactly the
        same manifest (CopyError otherwise: nothing is sent)."""
        archive, layout = self._paths()
        try:
            self._save(image_id, archive)
            again = as_held(archive, layout, prepared.compression, image_id, lazy=True)
            if again is None or again.digest != prepared.digest or again.fill is None:
                raise CopyError(f"{image_id[:19]}: the engine's save of the image is not the manifest "
                                f"{prepared.digest} the push prepared")
            again.fill(wanted)  # only those, each checked against its descriptor
            for digest in wanted:
                source = layout / digest.removeprefix("sha256:")
                target = prepared.layout / digest.removeprefix("sha256:")
                if source.exists() and not target.exists():
                    os.replace(source, target)
        except (LayerError, EngineError, tarfile.TarError, KeyError, ValueError, OSError) as exc:
            raise CopyError(f"{image_id[:19]}: the image cannot be saved from the engine: {exc}") from None
        finally:
            archive.unlink(missing_ok=True)
            shutil.rmtree(layout, ignore_errors=True)

    def _paths(self) -> tuple[Path, Path]:
        """A new (archive, layout) pair of names in the work folder."""
        self._count += 1
        return self.work / f"image-{self._count}.tar", self.work / f"layout-{self._count}"

    def _save(self, image_id: str, archive: Path) -> None:
        """The engine's `docker save` of `image_id` into `archive`."""
        with archive.open("wb") as fh:
            for chunk in self.store.save(image_id):
                fh.write(chunk)

    def send(self, prepared: Prepared, name: str, auth: RegistryAuth, *, plain_http: bool,
             ca_file: str | None = None) -> None:
        """Blobs the registry lacks, then the manifest by digest (`name@digest`): no tag is written."""
        authfile = write_auth_file(self.work / "auth.json", auth)
        args = ["copy", "--quiet", "--preserve-digests", "--retry-times", "0", "--dest-authfile", str(authfile)]
        if plain_http:
            args.append("--dest-tls-verify=false")
        elif ca_file:
            certs = self.work / "certs"
            certs.mkdir(exist_ok=True)
            shutil.copyfile(ca_file, certs / "ca.crt")
            args += ["--dest-cert-dir", str(certs)]
        try:
            self._skopeo([*args, f"dir:{prepared.layout}", f"docker://{name}@{prepared.digest}"],
                         f"{name}@{prepared.digest}")
        finally:
            authfile.unlink(missing_ok=True)


