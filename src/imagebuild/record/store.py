"""The record of one matrix: `.imagebuild/<matrix stem>.state.json` (see docs/RECORD.md).

One file per matrix says what `build`, `test` and `push` did to its images, so no later command needs the build's
flags again and every command shows the same inputs hash (the one in the image's label):

- `inputs`: the build inputs the images were planned with (BuildInputs.public(): credentials redacted — a redacted
  index URL plans the same Dockerfile and hash, since credentialed URLs are secret build args, never hashed);
- `images`: per plan id, the inputs hash, the image ID it was built as, the build's seconds and time (kept by a no-op
  rerun), tags per registry, push digests per registry;
- `tests`: smoke results keyed by content (image ID + suite version + expectations + where it ran), never by tag;
- `audits`: per image ID, the last `imagebuild audit -m` of exactly that image (record/audits.py).

A record of another schema, another tool version's schema or another matrix file is detected (`Record.problem`) and
never silently trusted. Writes are atomic and serialised with a lock file, so `build --test` and a parallel `push`
of the same matrix cannot lose each other's updates.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from imagebuild import __version__, values
from imagebuild.files import FileProblem, open_lock_file, read_bounded_text, write_text_atomic
from imagebuild.inputs import BuildInputs, SecurityRefresh
from imagebuild.record.audits import audits_problem
from imagebuild.secrets import MASK, mask_tree

SCHEMA = 1
STATE_DIR_ENV = "IMAGEBUILD_STATE_DIR"
DEFAULT_STATE_DIR = Path(".imagebuild")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_dir(explicit: str | Path | None = None) -> Path:
    return Path(explicit or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def record_path(matrix_path: str | Path, directory: str | Path | None = None) -> Path:
    return state_dir(directory) / f"{Path(matrix_path).stem}.state.json"


def file_sha256(path: str | Path) -> str | None:
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass
class ImageRecord:
    id: str  # plan id (<variant key>-<flavor>)
    flavor: str
    inputs_hash: str
    parent: str | None = None  # the parent's plan id
    image_id: str | None = None  # what the engine (or the registry, as config digest) holds for these inputs
    status: str = "planned"  # the last build's status for this image
    built_at: str | None = None  # when the build that made image_id ran (kept by no-op reruns)
    build_seconds: float | None = None  # that build's seconds (kept by no-op reruns)
    size: int | None = None
    layers: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, list[str]] = field(default_factory=dict)  # registry prefix ('' = local) -> tag + aliases
    pushes: dict[str, dict[str, Any]] = field(default_factory=dict)  # registry prefix -> {status, digest, tags, at, seconds}
    source: str | None = None  # where image_id came from: "built" | "engine" | "registry <prefix>"
    error: str | None = None
    log_path: str | None = None
    te_wheel: dict[str, Any] | None = None
    sbom: dict[str, Any] | None = None  # {"path", "sha256", "image_id", ...}: the SBOM written for image_id
    exports: dict[str, dict[str, Any]] = field(default_factory=dict)  # format -> {"path", "sha256", "image_id", ...} (export)
    env_layers: list[dict[str, Any]] = field(default_factory=list)  # [{"tier", "holds", "size"}] of image_id
    rebuilt_because: str | None = None  # why image_id was rebuilt when not for changed inputs ("security-refresh (…)")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImageRecord:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Record:
    matrix: str  # the matrix path as given
    matrix_digest: str | None  # sha256 of the matrix file when written
    inputs: dict[str, Any]  # BuildInputs.public()
    registry: str | None  # the registry prefix of the build (plan tags), None: the matrix's own
    images: dict[str, ImageRecord] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)  # test key -> result summary
    audits: dict[str, dict[str, Any]] = field(default_factory=dict)  # image ID -> its last audit (record/audits.py)
    schema: int = SCHEMA
    tool_version: str = __version__
    updated: str | None = None
    path: Path | None = None  # where it was read from (not stored)
    problem: str | None = None  # why it must not be trusted (not stored)

    # -- inputs ---------------------------------------------------------------------------------------------------
    def build_inputs(self) -> BuildInputs:
        i = self.inputs or {}
        return BuildInputs(
            ca_certs=tuple(Path(p) for p in i.get("ca_certs") or ()),
            pip_index_url=i.get("pip_index_url"),
            pip_extra_index_urls=tuple(i.get("pip_extra_index_urls") or ()),
            torch_index_url=i.get("torch_index_url"),
            wheelhouse=Path(i["wheelhouse"]) if i.get("wheelhouse") else None,
            backend=i.get("backend") or None,  # the backend renders its own Dockerfiles: part of the plan
            security_refresh=tuple(SecurityRefresh(k, v["index"], tuple(v.get("upgrade") or ()))
                                   for k, v in sorted((i.get("security_refresh") or {}).items())),
        )

    def describe_inputs(self) -> str:
        """The recorded inputs as the flags that give them (for one line on stderr)."""
        i = self.inputs or {}
        parts = [f"--ca-cert {p}" for p in i.get("ca_certs") or ()]
        if i.get("pip_index_url"):
            parts.append(f"--pip-index-url {i['pip_index_url']}")
        parts += [f"--pip-extra-index-url {u}" for u in i.get("pip_extra_index_urls") or ()]
        if i.get("torch_index_url"):
            parts.append(f"--torch-index-url {i['torch_index_url']}")
        if i.get("wheelhouse"):
            parts.append(f"--wheelhouse {i['wheelhouse']}")
        if i.get("backend"):
            parts.append(f"--backend {i['backend']}")
        if i.get("security_refresh"):
            parts.append(f"security refresh of {', '.join(sorted(i['security_refresh']))} (build --security-refresh)")
        return " ".join(parts) or "no build-input flags"

    # -- images ---------------------------------------------------------------------------------------------------
    def image(self, plan_id: str) -> ImageRecord | None:
        return self.images.get(plan_id)

    def to_json(self) -> str:
        doc = {
            "schema": self.schema, "tool_version": self.tool_version, "updated": self.updated,
            "matrix": self.matrix, "matrix_digest": self.matrix_digest, "inputs": self.inputs,
            "registry": self.registry,
            "images": {k: asdict(v) for k, v in self.images.items()},
            "tests": self.tests,
            "audits": self.audits,
        }
        # masked value by value (never the serialised text: a password `null` or `sha256` would break the JSON or
        # every image ID); the values that carry credentials are masked where they are made, this is the last net
        return json.dumps(mask_tree(doc), indent=2, sort_keys=False) + "\n"


_STR, _OPT_STR, _NUM = (str,), (str, type(None)), (int, float, type(None))
_IMAGE_FIELDS: dict[str, tuple[type, ...]] = {
    "id": _STR, "flavor": _STR, "inputs_hash": _STR, "parent": _OPT_STR, "image_id": _OPT_STR, "status": _STR,
    "built_at": _OPT_STR, "build_seconds": _NUM, "size": (int, type(None)), "layers": (list,), "versions": (dict,),
    "tags": (dict,), "pushes": (dict,), "source": _OPT_STR, "error": _OPT_STR, "log_path": _OPT_STR,
    "te_wheel": (dict, type(None)), "sbom": (dict, type(None)), "env_layers": (list,),
    "exports": (dict,), "rebuilt_because": _OPT_STR,
}
_TOP_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,), "tool_version": _STR, "updated": _OPT_STR, "matrix": _OPT_STR, "matrix_digest": _OPT_STR,
    "inputs": (dict, type(None)), "registry": _OPT_STR, "images": (dict, type(None)), "tests": (dict, type(None)),
}
_INPUT_LISTS, _INPUT_STRS = ("ca_certs", "pip_extra_index_urls"), ("pip_index_url", "torch_index_url", "wheelhouse")


_JSON_NAMES = {str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object",
               type(None): "null"}


def _kind(types: tuple[type, ...]) -> str:
    return " or ".join(dict.fromkeys(_JSON_NAMES[t] for t in types))


def shape_problem(doc: object) -> str | None:
    """Why a parsed record is not one this version wrote (valid JSON of the wrong shape), or None. Every field the
    commands read is checked here, so a damaged record is said and replaced, never a traceback later."""
    if not isinstance(doc, dict):
        return f"expected a JSON object, got {_JSON_NAMES.get(type(doc), 'a value')}"
    for key, types in _TOP_FIELDS.items():
        if key in doc and (not isinstance(doc[key], types) or isinstance(doc[key], bool)):
            return f"{key!r} must be {_kind(types)}"
    inputs = doc.get("inputs") or {}
    for key in _INPUT_LISTS:
        if not isinstance(inputs.get(key) or [], list) or not all(isinstance(v, str) for v in inputs.get(key) or []):
            return f"inputs.{key} must be a list of strings"
    for key in _INPUT_STRS:
        if not isinstance(inputs.get(key), _OPT_STR):
            return f"inputs.{key} must be a string or null"
    refresh = inputs.get("security_refresh") or {}
    if not isinstance(refresh, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("index"), str)
            and isinstance(v.get("upgrade") or [], list) and all(isinstance(u, str) for u in v.get("upgrade") or [])
            for v in refresh.values()):
        return "inputs.security_refresh must map plan ids to {index: string, upgrade: [strings]}"
    for plan_id, entry in (doc.get("images") or {}).items():
        if not isinstance(entry, dict):
            return f"images.{plan_id} must be an object"
        for key in ("id", "flavor", "inputs_hash"):
            if key not in entry:
                return f"images.{plan_id} lacks {key!r}"
        for key, types in _IMAGE_FIELDS.items():
            if key in entry and (not isinstance(entry[key], types) or isinstance(entry[key], bool)):
                return f"images.{plan_id}.{key} must be {_kind(types)}"
        for reg, tags in entry.get("tags", {}).items():
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                return f"images.{plan_id}.tags.{reg} must be a list of strings"
        for reg, push in entry.get("pushes", {}).items():
            if not isinstance(push, dict):
                return f"images.{plan_id}.pushes.{reg} must be an object"
        for fmt, export in entry.get("exports", {}).items():
            if not isinstance(export, dict):
                return f"images.{plan_id}.exports.{fmt} must be an object"
            for key in ("path", "sha256", "image_id", "format"):
                if key in export and not isinstance(export[key], str):
                    return f"images.{plan_id}.exports.{fmt}.{key} must be a string"
    for key, result in (doc.get("tests") or {}).items():
        if not isinstance(result, dict):
            return f"tests.{key} must be an object"
    return audits_problem(doc.get("audits"))


def _value_at(check: Callable[[str], str], value: object, where: str) -> str | None:
    if value is None:
        return None
    try:
        check(value)  # type: ignore[arg-type]  # a non-string is ValueProblem too
    except values.ValueProblem as problem:
        return f"{where}: {problem}"
    return None


def value_problem(doc: dict[str, Any]) -> str | None:
    """Why a record of the right shape holds a value that is not what its key says (an image ID that is not a digest,
    a date that is not RFC 3339, a path with a newline), or None. Commands pull, compare and print these: a hand-edited
    record is said and replaced like a damaged one. Call after shape_problem."""
    found = [_value_at(values.digest, doc.get("matrix_digest"), "matrix_digest"),
             _value_at(values.rfc3339, doc.get("updated"), "updated")]
    for plan_id, entry in (doc.get("images") or {}).items():
        at = f"images.{plan_id}"
        found += [_value_at(values.plain_text, plan_id, "images"),
                  _value_at(values.plain_text, entry.get("inputs_hash"), f"{at}.inputs_hash"),
                  _value_at(values.image_id, entry.get("image_id"), f"{at}.image_id"),
                  _value_at(values.rfc3339, entry.get("built_at"), f"{at}.built_at")]
        found += [_value_at(values.plain_text, tag, f"{at}.tags.{reg}") for reg, tags in entry.get("tags", {}).items()
                  for tag in tags]
        for reg, push in entry.get("pushes", {}).items():
            found += [_value_at(values.digest, push.get("digest"), f"{at}.pushes.{reg}.digest"),
                      _value_at(values.rfc3339, push.get("at"), f"{at}.pushes.{reg}.at")]
        for fmt, export in (entry.get("exports") or {}).items():
            if isinstance(export, dict):
                found += [_value_at(values.image_id, export.get("image_id"), f"{at}.exports.{fmt}.image_id"),
                          _value_at(values.plain_text, export.get("path"), f"{at}.exports.{fmt}.path")]
    return next((f for f in found if f), None)


def new_record(matrix_path: str | Path, inputs: BuildInputs, registry: str | None) -> Record:
    return Record(matrix=str(matrix_path), matrix_digest=file_sha256(matrix_path), inputs=inputs.public(),
                  registry=registry)


def _same_matrix(recorded: str, matrix_path: Path | str) -> bool:
    """Is `recorded` (the record's `matrix`) this matrix file? Its path as written, where a secret the writing run
    knew (a password that is also a fragment of a folder's name) was masked (`***`, secrets.py masks every string
    the record holds): then any text in its place, the rest exactly this file's path."""
    here = Path(matrix_path).resolve()
    if MASK not in recorded:
        return Path(recorded).resolve() == here
    pattern = ".+".join(re.escape(part) for part in recorded.split(MASK))
    return any(re.fullmatch(pattern, str(path)) for path in (here, Path(matrix_path)))


def load_record(matrix_path: str | Path, directory: str | Path | None = None) -> Record | None:
    """The matrix's record, or None when there is none. A record that cannot be trusted comes back with `problem`
    set (and its images/tests emptied), so callers say why instead of using it."""
    path = record_path(matrix_path, directory)
    if not path.exists():
        return None
    try:
        doc = json.loads(read_bounded_text(path, "record"))
        why = shape_problem(doc) or value_problem(doc)
    except FileProblem as exc:
        why = str(exc).removeprefix(f"{path}: ")
    except (ValueError, RecursionError) as exc:
        why = f"not JSON ({exc})" if not isinstance(exc, RecursionError) else "nested too deeply"
    if why:
        rec = Record(str(matrix_path), None, {}, None, path=path)
        rec.problem = f"{path}: unreadable ({why}); it is ignored and will be replaced"
        return rec
    rec = Record(
        matrix=str(doc.get("matrix") or matrix_path), matrix_digest=doc.get("matrix_digest"),
        inputs=doc.get("inputs") or {}, registry=doc.get("registry"),
        images={k: ImageRecord.from_dict(v) for k, v in (doc.get("images") or {}).items()},
        tests=doc.get("tests") or {}, audits=doc.get("audits") or {}, schema=doc.get("schema", 0),
        tool_version=doc.get("tool_version", "?"),
        updated=doc.get("updated"), path=path,
    )
    if rec.schema != SCHEMA:
        rec.problem = (f"{path}: written by imagebuild {rec.tool_version} (record schema {rec.schema}, this version "
                       f"reads {SCHEMA}); it is ignored and will be replaced")
    elif not _same_matrix(rec.matrix, matrix_path):
        rec.problem = (f"{path}: records another matrix file ({rec.matrix}, not {matrix_path}); it is ignored and "
                       "will be replaced")
    if rec.problem:
        rec.images, rec.tests, rec.audits = {}, {}, {}
    return rec


@contextlib.contextmanager
def updating(matrix_path: str | Path, inputs: BuildInputs | None = None, registry: str | None = None,
             directory: str | Path | None = None, replace_inputs: bool = False) -> Iterator[Record]:
    """Read-modify-write the matrix's record under a lock. `replace_inputs` (build): the record now describes
    `inputs`/`registry`; image entries of other inputs stay until the build overwrites them (their hashes differ,
    so they are never mistaken for the new ones)."""
    path = record_path(matrix_path, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_lock_file(path.parent / f".{path.name}.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            rec = load_record(matrix_path, directory)
            if rec is None or rec.problem:
                rec = new_record(matrix_path, inputs or BuildInputs(), registry)
            if replace_inputs and inputs is not None:
                rec.inputs, rec.registry = inputs.public(), registry
            rec.matrix_digest = file_sha256(matrix_path)
            yield rec
            rec.updated, rec.schema, rec.tool_version = now(), SCHEMA, __version__
            write_text_atomic(path, rec.to_json())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
