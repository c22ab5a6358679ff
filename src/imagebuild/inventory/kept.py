"""An image's ImageFiles as bytes to keep (pipeline: once per image ID with the state, record/derived.py) and back.

`loads` trusts nothing: a kept file whose bytes hash right may still have been planted, so every field is checked for
its type (a string, or a list of strings where the model has a tuple) and anything else is a ValueError, which the
caller treats as "derive again", never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

from imagebuild.inventory.model import Bundled, DebPackage, ImageFiles, OSRelease, PyDist

FORMAT = 1  # of the JSON written here (what the readers put in it: record/derived.py's FORMAT)
T = TypeVar("T")


def dumps(files: ImageFiles) -> bytes:
    """Stable bytes: the same files give the same bytes (so the same kept name)."""
    doc = {"format": FORMAT, "os_release": dataclasses.asdict(files.os_release),
           "debs": [dataclasses.asdict(d) for d in files.debs],
           "pythons": [dataclasses.asdict(p) for p in files.pythons]}
    if files.bundled:  # only then: the kept bytes of an image without any stay what they were
        doc["bundled"] = [dataclasses.asdict(b) for b in files.bundled]
    return (json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def loads(data: bytes) -> ImageFiles:
    """The ImageFiles `dumps` wrote; ValueError for anything else."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"not UTF-8 JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not kept inventory files of format {FORMAT}")
    debs, pythons = doc.get("debs"), doc.get("pythons")
    if not isinstance(debs, list) or not isinstance(pythons, list):
        raise ValueError("'debs' and 'pythons' must be lists")
    found = doc.get("bundled", [])
    if not isinstance(found, list):
        raise ValueError("'bundled' must be a list")
    return ImageFiles(os_release=_build(OSRelease, doc.get("os_release")),
                      debs=tuple(_build(DebPackage, d) for d in debs),
                      pythons=tuple(_build(PyDist, p) for p in pythons),
                      bundled=tuple(_build(Bundled, b) for b in found))


def _build(cls: type[T], value: Any) -> T:
    """`cls` (a dataclass of str and tuple-of-str fields) from a JSON object, each field's type checked."""
    if not isinstance(value, dict):
        raise ValueError(f"a {cls.__name__} must be an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(value) - set(fields)
    if unknown:
        raise ValueError(f"a {cls.__name__} has no field {sorted(unknown)[0]!r}")
    out: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in value:
            if f.default is dataclasses.MISSING:
                raise ValueError(f"a {cls.__name__} lacks {name!r}")
            continue
        v = value[name]
        if isinstance(f.default, tuple):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ValueError(f"{cls.__name__}.{name} must be a list of strings")
            v = tuple(v)
        elif not isinstance(v, str):
            raise ValueError(f"{cls.__name__}.{name} must be a string")
        out[name] = v
    return cls(**out)
