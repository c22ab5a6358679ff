"""`build --security-refresh` under a lock: the apt pins the security suite fixed are raised to the fixed versions
(an image's entry only; every other pin, pip file and the base's mirror state as they were) and the lock is written
again, sealed (content_sha256) as `imagebuild lock` writes it. A lock only ever moves here or by `imagebuild lock`:
a build without --security-refresh installs exactly what it pins."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from imagebuild.files import write_text_atomic
from imagebuild.lock.apt import compare_versions
from imagebuild.lock.model import Lock, LockError, dump


def raise_pins(lock: Lock, fixed: dict[str, dict[str, str]]) -> tuple[Lock, dict[str, dict[str, tuple[str, str]]]]:
    """`fixed`: image -> apt package -> the version the security suite fixed it in. Returns the lock with each pinned
    package of those images that is older than its fix raised to it, and image -> package -> (old, new) for each."""
    images = dict(lock.images)
    changed: dict[str, dict[str, tuple[str, str]]] = {}
    for image_id, packages in fixed.items():
        entry = images.get(image_id)
        if entry is None:
            continue
        apt = dict(entry.apt)
        for name, version in packages.items():
            if name in apt and compare_versions(apt[name], version) < 0:
                changed.setdefault(image_id, {})[name] = (apt[name], version)
                apt[name] = version
        if image_id in changed:
            images[image_id] = dataclasses.replace(entry, apt=dict(sorted(apt.items())))
    return dataclasses.replace(lock, images=images), changed


def write_lock(lock: Lock, path: str | Path) -> None:
    try:
        write_text_atomic(Path(path), dump(lock))
    except OSError as exc:
        raise LockError(f"{path}: cannot write the refreshed lock ({exc.strerror or exc})") from None
