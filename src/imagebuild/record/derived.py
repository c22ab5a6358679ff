"""What is derived from an image's content, kept once per image ID with the state: `<state dir>/derived/<image id>/`.

An image ID is the digest of the image's config, which names every layer by the digest of its content: whatever is
read out of an image (the files its inventory parses, the SBOM made of them) comes out the same every time, so it is
derived once and kept here, beside the record, not in a report folder that every CI runner makes anew. A no-op
`build` into a new report folder then copies the kept SBOM instead of reading gigabytes of image again.

Each kept file is content-addressed, `<name>.<sha256 hex of its bytes>` (name: what it is and a key of everything
else that went into it, e.g. `sbom-<key>`), written atomically (files.write_inside: no link followed, never changed
in place). Before reuse it is read (bounded, not through a link) and hashed: a file whose bytes are not what its name
says (damaged, cut short, planted) is not trusted: one warning line names it, it is removed, and the caller derives
again. Nothing here ever raises for a bad kept file; a kept copy that cannot be written is a warning too (the run
stands, the next one derives again).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from imagebuild import __version__
from imagebuild.files import FileProblem, read_bounded, regular_file_inside, write_inside
from imagebuild.record.store import state_dir

# part of every key (key_of): bump it when what a kept file holds changes for the same image, i.e. when the inventory
# readers (inventory/dpkg.py, pydist.py, tarpick.py, kept.py) or the SBOM writer (inventory/cyclonedx.py) change what
# they give; every kept file is then derived again once (a release changes __version__, also in every key)
FORMAT = 1
FOLDER = "derived"
MAX_KEPT_BYTES = 64 << 20  # an SBOM of a CUDA image is a few MB; a bigger file is not one this tool kept
_IMAGE_ID = re.compile(r"sha256:([0-9a-f]{64})")
_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{0,99}")
_HEX = re.compile(r"[0-9a-f]{64}")

Warn = Callable[[str], None]


def key_of(*parts: object) -> str:
    """A short key of what else (besides the image) a derived file depends on: the format, this tool's version and
    `parts` (their repr, in order)."""
    text = "\n".join(repr(p) for p in (FORMAT, __version__, *parts))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Derived:
    """The kept derived files under one state folder (`state`: --state-dir, IMAGEBUILD_STATE_DIR, .imagebuild/)."""

    def __init__(self, state: str | Path | None, warn: Warn) -> None:
        self.state, self.warn = state_dir(state), warn

    def _folder(self, image_id: str) -> str | None:
        """The image's folder, relative to the state folder; None for anything but a full image ID."""
        m = _IMAGE_ID.fullmatch(image_id or "")
        return f"{FOLDER}/{m.group(1)}" if m else None

    def _copies(self, image_id: str, name: str, kind: str | None = None) -> list[tuple[Path, str]]:
        """(path, the sha256 hex its name claims) of each kept file called `name` (or whose name starts with
        `kind`), in name order."""
        folder = self._folder(image_id)
        if folder is None or not _NAME.fullmatch(name):
            return []
        try:
            entries = sorted(os.listdir(self.state / folder)) if regular_folder(self.state, folder) else []
        except OSError:
            return []
        out = []
        for entry in entries:
            stem, _, digest = entry.rpartition(".")
            if (stem == name or kind is not None and stem.startswith(kind)) and _HEX.fullmatch(digest):
                out.append((self.state / folder / entry, digest))
        return out

    def get(self, image_id: str, name: str) -> bytes | None:
        """The kept `name` of `image_id` when one is there and its bytes hash to what its name says, else None
        (a copy that does not: a warning naming it, removed)."""
        for path, digest in self._copies(image_id, name):
            try:
                if not regular_file_inside(self.state, path.relative_to(self.state)):
                    raise FileProblem(f"{path}: not a regular file")
                data = read_bounded(path, "kept derived file", MAX_KEPT_BYTES)
            except FileProblem as exc:
                self.reject(path, str(exc).removeprefix(f"{path}: "))
                continue
            if hashlib.sha256(data).hexdigest() == digest:
                return data
            self.reject(path, "its bytes do not hash to the digest its name says (damaged or changed)")
        return None

    def put(self, image_id: str, name: str, data: bytes, kind: str | None = None) -> None:
        """Keep `data` as `name` of `image_id`; other kept copies of that name, or of every name starting with
        `kind` (one SBOM per image: the latest key's), are removed. A warning when it cannot be kept."""
        folder = self._folder(image_id)
        if folder is None or not _NAME.fullmatch(name):
            return
        digest = hashlib.sha256(data).hexdigest()
        for attempt in (1, 2):  # again once: another thread (or run) may have made a folder just before this one
            try:
                if not self.state.is_dir():  # a run checked it (pipeline.flow); a caller elsewhere may not have
                    self.state.mkdir(parents=True, exist_ok=True)
                write_inside(self.state, f"{folder}/{name}.{digest}", data, "kept derived file")
                break
            except (FileProblem, OSError) as exc:
                if attempt == 2:
                    self.warn(f"warning: {exc} (not kept: the next run derives it again)")
                    return
        for path, _ in self._copies(image_id, name, kind):
            if path.name != f"{name}.{digest}":
                _remove(self.state, path)

    def discard(self, image_id: str, name: str, why: str) -> None:
        """Every kept `name` of `image_id`: its bytes hash right, but the caller found them not to be what the name
        claims (planted): said, removed."""
        for path, _ in self._copies(image_id, name):
            self.reject(path, why)

    def reject(self, path: Path, why: str) -> None:
        """A kept file that must not be used: said (naming it) and removed, so it is derived again."""
        self.warn(f"warning: {path}: kept copy not used ({why}); deriving it again")
        _remove(self.state, path)


def regular_folder(base: Path, rel: str) -> bool:
    """Is `base/rel` a folder reached without a symbolic link below `base`?"""
    here = Path(base)
    for part in Path(rel).parts:
        here = here / part
        try:
            if not os.path.isdir(here) or os.path.islink(here):
                return False
        except OSError:
            return False
    return True


def _remove(base: Path, path: Path) -> None:
    """Remove a kept file (or a link planted in its place: the link, never what it names)."""
    with contextlib.suppress(OSError, ValueError):
        if regular_folder(base, str(path.parent.relative_to(base))) and not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
