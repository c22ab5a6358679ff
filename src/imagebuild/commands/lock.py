"""`imagebuild lock`: write the matrix's lock (images/cpu.yaml -> images/cpu.lock), or check it (--check)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from imagebuild.commands._options import build_input_options, matrix_option, registry_option
from imagebuild.errors import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from imagebuild.inputs import BuildInputs
    from imagebuild.lock import Lock
    from imagebuild.models import ImagePlan


@click.command("lock")
@matrix_option
@registry_option
@build_input_options
@click.option("--check", is_flag=True,
              help="Do not write: exit 1 and name every entry when the lock no longer fits the matrix.")
@click.option("--quiet", "-q", is_flag=True, help="Only errors and the result line.")
def command(matrix: str, registry: str | None, inputs: BuildInputs, check: bool, quiet: bool) -> int:
    """Pin every image's pip files (version + sha256) and apt versions in a lock next to the matrix.

    pip runs `pip install --dry-run --report` per image with the build's index, extra index, wheelhouse
    (--find-links) and CA files, for the image's Python and platform; apt versions come from the base suites'
    Packages indexes. While the lock fits the matrix, `build` installs exactly these (pip --require-hashes);
    `build --locked` refuses to build without a fitting lock.

    \b
    Example:
      imagebuild lock --matrix images/cpu.yaml --wheelhouse /opt/wheels --torch-index-url none
      imagebuild lock --check --matrix images/cpu.yaml
    """
    from imagebuild.commands._options import resolve_matrix_path
    from imagebuild.lock import LockError, dump, load, lock_path, parse, problems
    from imagebuild.pipeline.locking import make_locker  # the bootstrap's apt sources: not for --help
    from imagebuild.pipeline.settings import check_inputs
    from imagebuild.plan import make_plan

    check_inputs(inputs)
    matrix_path = resolve_matrix_path(matrix)
    path = lock_path(matrix_path)
    plan = make_plan(matrix_path, inputs, registry, use_lock=False)
    if check:
        if not path.is_file():
            click.echo(f"error: {path}: no lock for {matrix_path}; `imagebuild lock --matrix {matrix}` writes one",
                       err=True)
            return EXIT_FAILED
        lock = load(path)
        found = problems(lock, plan.images) + wheelhouse_problems(lock, plan.images)
        for line in found:
            click.echo(f"stale: {line}", err=True)
        if found:
            click.echo(f"{path}: stale ({len(found)} entr{'y' if len(found) == 1 else 'ies'} above); "
                       f"`imagebuild lock --matrix {matrix}` rewrites it", err=True)
            return EXIT_FAILED
        click.echo(f"{path}: up to date with {matrix_path} ({len(plan.images)} images)")
        return EXIT_OK

    locker = make_locker(inputs, echo=None if quiet else (lambda m: click.echo(m, err=True)))
    start = time.monotonic()
    lock = locker.lock(plan, matrix_path.name, made_with=made_with(inputs))
    text = dump(lock)
    try:  # what an index or a mirror answered is checked by the reader's own rules before it is written
        parse(text, str(path))
    except LockError as exc:
        click.echo(f"error: an index or mirror answered a value the lock cannot hold, nothing written: {exc}", err=True)
        return EXIT_FAILED
    _write(path, text)
    pins = sum(len(i.pip) for i in lock.images.values())
    apt = sum(len(i.apt) for i in lock.images.values())
    click.echo(f"wrote {path}: {len(lock.images)} images, {pins} pip files, {apt} apt packages "
               f"({time.monotonic() - start:.1f} s; pip {locker.pip.seconds:.1f} s in {locker.pip.calls} "
               f"resolution{'s' if locker.pip.calls != 1 else ''})")
    return EXIT_OK


def wheelhouse_problems(lock: Lock, images: list[ImagePlan]) -> list[str]:
    """Locked files that sit in the build's --wheelhouse with other bytes (the build would refuse them)."""
    from imagebuild.plan.hashing import file_digest, save_cache

    out: list[str] = []
    for image in images:
        entry, folder = lock.images.get(image.id), image.context_dirs.get("wheelhouse")
        if entry is None or folder is None:
            continue
        for pin in entry.pip:
            local = Path(folder) / pin.file
            if local.is_file() and file_digest(local) != pin.sha256:
                out.append(f"{lock.path}: image {image.id}: {local} has sha256 {file_digest(local)}, the lock "
                           f"has {pin.sha256} for {pin.requirement()}")
    save_cache()
    return out


def made_with(inputs: BuildInputs) -> str:
    """The build options the lock was made with, as options (credentials redacted), for its header."""
    pub = inputs.public()
    parts = [f"--ca-cert {p}" for p in pub["ca_certs"]]
    if pub["pip_index_url"]:
        parts.append(f"--pip-index-url {pub['pip_index_url']}")
    parts += [f"--pip-extra-index-url {u}" for u in pub["pip_extra_index_urls"]]
    if pub["torch_index_url"]:
        parts.append(f"--torch-index-url {pub['torch_index_url']}")
    if pub["wheelhouse"]:
        parts.append(f"--wheelhouse {pub['wheelhouse']}")
    return " ".join(parts) or "the default indexes"


def _write(path: Path, text: str) -> None:
    """Atomically: a reader never sees half a lock."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
