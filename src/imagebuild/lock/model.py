"""The lock file: what one matrix's images install, by exact version and file hash; read, written and compared here.

A lock is text meant for review next to its matrix (`images/cpu.yaml` -> `images/cpu.lock`): YAML, keys sorted,
one pip file per line, no timestamps and no paths of the machine that wrote it, so regenerating it for the same
upstream state gives the same bytes and a diff shows exactly what moved. `entry_digest` is what the plan feeds into
an image's inputs hash: the content of the image's entry, never the file's header, path or mtime.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

import yaml

from imagebuild import values
from imagebuild.errors import UsageError
from imagebuild.files import FileProblem, YamlTooBig, compose_yaml, read_bounded_text

LOCK_FORMAT = 1
SUFFIX = ".lock"


class LockError(UsageError):
    """A lock file that cannot be read, or that does not match its matrix (exit 2)."""


class _BadValue(LockError):
    """A value that is not what its key says (values.py); `parse` puts the line it is on into the message."""

    def __init__(self, where: str, value: object, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.value, self.why = where, value, why


def _valid(check: Callable[[str], str], value: str, where: str) -> str:
    """`value` when `check` (one of imagebuild.values) accepts it; else the lock's error naming key and value."""
    try:
        return check(value)
    except values.ValueProblem as problem:
        raise _BadValue(where, value, str(problem)) from None


def canonical_name(name: str) -> str:
    """PEP 503 normalised project name (`Jinja2` -> `jinja2`, `jupyter_core` -> `jupyter-core`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class PipPin:
    name: str  # canonical
    version: str  # as pip reports it, local label included ("2.13.0+cpu")
    sha256: str
    file: str  # the wheel's file name (reviewers read it; hash mismatches name it)

    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class BaseLock:
    """Where the base flavor's FROM comes from, as it was when the lock was made."""

    kind: str  # "bootstrap" | "registry"
    ref: str | None = None  # registry: the reference the matrix names
    digest: str | None = None  # registry: the manifest digest it had
    suite: str | None = None  # bootstrap: the OS codename
    mirror: str | None = None  # bootstrap: the mirror (credentials redacted)
    snapshot: str | None = None
    extra_packages: tuple[str, ...] = ()  # the matrix's base.packages (what the lock was made for)
    mirror_state: dict[str, str] = field(default_factory=dict)  # "<url> <suite>" -> InRelease Date
    packages: dict[str, str] = field(default_factory=dict)  # bootstrap package -> version at that mirror state


@dataclass(frozen=True)
class LockedImage:
    """One image of the plan (`<variant key>-<flavor>`): what its own layers install on top of its parent."""

    id: str
    os: str
    python: str
    platform: str  # newest pip platform tag the files were chosen for (older manylinux tags and linux_* too)
    pip_requires: tuple[str, ...]  # the requirements the matrix rendered for this flavor (what the lock is for)
    pip: tuple[PipPin, ...] = ()  # the closure pip installs in this image's pip stage, sorted by name
    apt: dict[str, str] = field(default_factory=dict)  # apt package -> version (OS archive packages only)
    base: BaseLock | None = None  # base flavor only

    def pin(self, name: str) -> PipPin | None:
        wanted = canonical_name(name)
        return next((p for p in self.pip if p.name == wanted), None)


@dataclass(frozen=True)
class Lock:
    matrix: str  # the matrix file's name (not its path: the lock sits next to it)
    images: dict[str, LockedImage]
    path: str = ""  # where it was read from (messages only; never hashed)
    made_with: str = ""  # the build options it was made with (header comment only; never hashed)
    seal: str = "ok"  # its content_sha256: "ok" (matches), "edited" (does not), "missing" (an older lock); check.py


def lock_path(matrix_path: str | Path) -> Path:
    """images/cpu.yaml -> images/cpu.lock"""
    return Path(matrix_path).with_suffix(SUFFIX)


# -- requirements file handed to the build ---------------------------------------------------------------------------
def requirements_text(image: LockedImage) -> str:
    """The pip requirements file the image's pip stage installs with `--require-hashes` (every line pinned+hashed)."""
    lines = [f"# imagebuild lock, image {image.id}: pip install --require-hashes -r this file"]
    for p in image.pip:
        lines.append(f"{p.requirement()} \\\n    --hash=sha256:{p.sha256}")
    return "\n".join(lines) + "\n"


def content_digest(matrix: str, images: dict[str, LockedImage]) -> str:
    """sha256 of everything the lock says (matrix name and every entry): written into the lock, so an edit inside it
    (a deleted transitive pin, a version changed with its hash kept) is found by `lock --check` and `build`."""
    doc = {"matrix": matrix, "images": {k: _image_doc(v) for k, v in sorted(images.items())}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def entry_digest(image: LockedImage) -> str:
    """sha256 of the image's entry content (goes into the inputs hash)."""
    return hashlib.sha256(json.dumps(_image_doc(image), sort_keys=True).encode()).hexdigest()


# -- writing ---------------------------------------------------------------------------------------------------------
def _q(value: object) -> str:
    """A YAML scalar that reads back as the same string (JSON strings are valid YAML)."""
    return "null" if value is None else json.dumps(str(value))


def _base_doc(b: BaseLock) -> dict[str, Any]:
    if b.kind == "registry":
        return {"kind": b.kind, "ref": b.ref, "digest": b.digest}
    return {"kind": b.kind, "suite": b.suite, "mirror": b.mirror, "snapshot": b.snapshot,
            "extra_packages": sorted(b.extra_packages), "mirror_state": dict(sorted(b.mirror_state.items())),
            "packages": dict(sorted(b.packages.items()))}


def _image_doc(i: LockedImage) -> dict[str, Any]:
    doc: dict[str, Any] = {"os": i.os, "python": i.python, "platform": i.platform,
                           "pip_requires": sorted(i.pip_requires),
                           "pip": [{"name": p.name, "version": p.version, "sha256": p.sha256, "file": p.file}
                                   for p in sorted(i.pip, key=lambda p: p.name)],
                           "apt": dict(sorted(i.apt.items()))}
    if i.base is not None:
        doc["base"] = _base_doc(i.base)
    return doc


HEADER = """\
# imagebuild lock for {matrix}: what `imagebuild build` installs, by exact version and file hash.
# Written by `imagebuild lock --matrix {matrix}` (same command to refresh it; do not edit by hand).
# `imagebuild lock --check --matrix {matrix}` says whether it still matches the matrix; while it does, `build`
# installs every pip file below with `pip install --require-hashes` and every apt package as `name=version`.
# pip: `pip install --dry-run --report` per image for its Python and platforms, each image on top of its parent's
#      pins; sha256 of the exact wheel (for a --wheelhouse file: that file's). Wheels only (--only-binary=:all:).
# apt: the newest version in the base suites' Packages indexes (suite, -updates, -security; amd64) at the recorded
#      mirror state; packages these depend on are not pinned. transformer_engine (built locally) is not hash-locked.
# Made with: {made_with}
"""


def dump(lock: Lock) -> str:
    out = [HEADER.format(matrix=lock.matrix, made_with=lock.made_with or "the default indexes"),
           f"lock_format: {LOCK_FORMAT}", f"content_sha256: {_q(content_digest(lock.matrix, lock.images))}",
           f"matrix: {_q(lock.matrix)}", "images:"]
    for image_id in sorted(lock.images):
        doc = _image_doc(lock.images[image_id])
        out.append(f"  {_q(image_id)}:")
        for key in ("os", "python", "platform"):
            out.append(f"    {key}: {_q(doc[key])}")
        out.append(f"    pip_requires: [{', '.join(_q(r) for r in doc['pip_requires'])}]")
        if "base" in doc:
            out.append("    base:")
            for key, value in doc["base"].items():
                if isinstance(value, dict):
                    out.append(f"      {key}:" + ("" if value else " {}"))
                    out += [f"        {_q(k)}: {_q(v)}" for k, v in value.items()]
                elif isinstance(value, list):
                    out.append(f"      {key}: [{', '.join(_q(v) for v in value)}]")
                else:
                    out.append(f"      {key}: {_q(value)}")
        out.append("    apt:" + ("" if doc["apt"] else " {}"))
        out += [f"      {_q(k)}: {_q(v)}" for k, v in doc["apt"].items()]
        out.append("    pip:" + ("" if doc["pip"] else " []"))
        out += [f"      - {{name: {_q(p['name'])}, version: {_q(p['version'])}, sha256: {_q(p['sha256'])}, "
                f"file: {_q(p['file'])}}}" for p in doc["pip"]]
    return "\n".join(out) + "\n"


# -- reading ---------------------------------------------------------------------------------------------------------
_T = TypeVar("_T")  # _need(..., list) -> list; a tuple of kinds -> Any (the caller narrows)


@overload
def _need(mapping: object, key: str, where: str) -> str: ...
@overload
def _need(mapping: object, key: str, where: str, kind: type[_T]) -> _T: ...
@overload
def _need(mapping: object, key: str, where: str, kind: tuple[type, ...]) -> Any: ...
def _need(mapping: object, key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise LockError(f"{where}: missing `{key}`")
    value = mapping[key]
    if not isinstance(value, kind):
        raise LockError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _scalar(value: object, where: str) -> str:
    """A string, or a number YAML read from unquoted text; never a list or mapping (whose text could be huge)."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise LockError(f"{where}: expected a string, got {type(value).__name__}")


def _opt_scalar(value: object, where: str) -> str | None:
    return None if value is None else _scalar(value, where)


def _str_list(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise LockError(f"{where}: expected a list, got {type(value).__name__}")
    return tuple(_scalar(v, f"{where}[{n}]") for n, v in enumerate(value))


def _str_map(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LockError(f"{where}: expected a mapping")
    return {_scalar(k, where): _scalar(v, f"{where}.{k}") for k, v in value.items()}


def _checked_map(mapping: dict[str, str], where: str, key: Callable[[str], str],
                 value: Callable[[str], str]) -> dict[str, str]:
    return {_valid(key, k, f"{where} key"): _valid(value, v, f"{where}.{k}") for k, v in mapping.items()}


def _parse_base(doc: object, where: str) -> BaseLock:
    kind = _need(doc, "kind", where)
    assert isinstance(doc, dict)
    opt = {k: _opt_scalar(doc.get(k), f"{where}.{k}") for k in ("ref", "digest", "suite", "mirror", "snapshot")}
    for key, text in opt.items():
        if text is not None:
            _valid(values.digest if key == "digest" else values.plain_text, text, f"{where}.{key}")
    if kind == "registry":
        return BaseLock(kind=kind, ref=opt["ref"], digest=opt["digest"])
    if kind != "bootstrap":
        raise LockError(f"{where}.kind: {kind!r}; valid choices: bootstrap, registry")
    extra = _str_list(doc.get("extra_packages"), f"{where}.extra_packages")
    return BaseLock(kind=kind, suite=opt["suite"], mirror=opt["mirror"], snapshot=opt["snapshot"],
                    extra_packages=tuple(_valid(values.debian_package, p, f"{where}.extra_packages[{n}]")
                                         for n, p in enumerate(extra)),
                    mirror_state=_checked_map(_str_map(doc.get("mirror_state"), f"{where}.mirror_state"),
                                              f"{where}.mirror_state", values.plain_text, values.rfc3339),
                    packages=_checked_map(_str_map(doc.get("packages"), f"{where}.packages"), f"{where}.packages",
                                          values.debian_package, values.debian_version))


def _parse_image(image_id: str, doc: object, where: str) -> LockedImage:
    """One image's entry, every value checked as what its key says (imagebuild.values) before anything uses it: the
    apt versions and pip pins reach RUN lines and the --require-hashes file."""
    pins = []
    for n, item in enumerate(_need(doc, "pip", where, list)):
        at = f"{where}.pip[{n}]"
        version = _scalar(_need(item, "version", at, (str, int, float)), f"{at}.version")
        pins.append(PipPin(name=canonical_name(_valid(values.project_name, _need(item, "name", at), f"{at}.name")),
                           version=_valid(values.pep440_version, version, f"{at}.version"),
                           sha256=_valid(values.sha256_hex, _need(item, "sha256", at), f"{at}.sha256"),
                           file=_valid(values.wheel_file, _need(item, "file", at), f"{at}.file")))
    assert isinstance(doc, dict)
    text = {key: _valid(values.plain_text, _scalar(_need(doc, key, where, kinds), f"{where}.{key}"),
                        f"{where}.{key}")
            for key, kinds in (("os", str), ("python", (str, float)), ("platform", str))}
    requires = _str_list(_need(doc, "pip_requires", where, list), f"{where}.pip_requires")
    return LockedImage(
        id=_valid(values.plain_text, image_id, where), os=text["os"], python=text["python"],
        platform=text["platform"],
        pip_requires=tuple(_valid(values.plain_text, r, f"{where}.pip_requires[{n}]") for n, r in enumerate(requires)),
        pip=tuple(sorted(pins, key=lambda p: p.name)),
        apt=_checked_map(_str_map(doc.get("apt"), f"{where}.apt"), f"{where}.apt", values.debian_package,
                         values.debian_version),
        base=_parse_base(doc["base"], f"{where}.base") if doc.get("base") is not None else None,
    )


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_LOCK_BYTES = 4 << 20  # h100's 9 images lock to a few hundred KB


def _yaml(text: str, path: str) -> object:
    """The document, read within files.compose_yaml's limits (no alias bomb, no recursion, bounded size)."""
    try:
        compose_yaml(text)
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)
    except YamlTooBig as big:
        raise LockError(f"{path}:{big.line}: {big.why}") from None
    except yaml.YAMLError as exc:
        raise LockError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise LockError(f"{path}: not valid YAML (nested too deeply)") from None


def _line_of(text: str, value: object) -> int:
    """The line of the first scalar in `text` whose value is `value` (0: not found); the graph is composed again
    only for a lock already found bad, within the same limits."""
    stack = [compose_yaml(text)]
    while stack:
        node = stack.pop(0)
        if node is None:
            continue
        if isinstance(node.value, str):
            if node.value == str(value):
                return int(node.start_mark.line) + 1
        elif isinstance(node.value, list):
            stack += [x for item in node.value for x in (item if isinstance(item, tuple) else (item,))]
    return 0


def parse(text: str, path: str = "<lock>") -> Lock:
    doc = _yaml(text, path)
    if not isinstance(doc, dict):
        raise LockError(f"{path}: not an imagebuild lock (expected a mapping with `images`)")
    fmt = doc.get("lock_format")
    if fmt != LOCK_FORMAT:
        raise LockError(f"{path}: lock_format {fmt!r} is not {LOCK_FORMAT}; regenerate it with `imagebuild lock`")
    images = _need(doc, "images", path, dict)
    try:
        parsed = {_scalar(k, f"{path}: images"): _parse_image(str(k), v, f"{path}: images.{k}")
                  for k, v in images.items()}
    except _BadValue as bad:
        line = _line_of(text, bad.value)
        where = f"{path}:{line}" + bad.where[len(path):] if line and bad.where.startswith(path) else bad.where
        raise LockError(f"{where}: {bad.why}; regenerate it with `imagebuild lock`") from None
    made_with = next((ln[len("# Made with: "):] for ln in text.splitlines() if ln.startswith("# Made with: ")), "")
    matrix = _opt_scalar(doc.get("matrix"), f"{path}: matrix") or ""
    recorded = _opt_scalar(doc.get("content_sha256"), f"{path}: content_sha256")
    seal = "missing" if recorded is None else "ok" if recorded == content_digest(matrix, parsed) else "edited"
    return Lock(matrix=matrix, images=parsed, path=path, made_with=made_with, seal=seal)


def load(path: str | Path) -> Lock:
    try:
        text = read_bounded_text(Path(path), "lock", MAX_LOCK_BYTES)
    except FileProblem as exc:
        raise LockError(str(exc)) from None
    return parse(text, str(path))
