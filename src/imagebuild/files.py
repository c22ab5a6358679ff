"""Files the tool reads and writes, handled one way everywhere.

- `write_text_atomic`: readers never see half a file (a temp file beside it, then rename; report, record, catalog).
- `read_bounded`: every state or input file (matrix, lock, record, report) is read with a size limit, so a hostile or
  damaged file costs a bounded amount of memory and time; over it is one `FileProblem` line.
- `certificate_blocks`: only the CERTIFICATE PEM blocks of a CA file reach an image. Intercepting proxies often ship
  their CA file with the private key in it; copying the whole file would put the key in every pushed image.
- `compose_yaml`: a YAML document (matrix, lock) composed only within limits: parser events counted first, then the
  node graph measured once (`yaml_shape_problem`) before anything is built from it, so an alias bomb ("billion
  laughs", nested aliases or merge keys) or a recursive alias is one error line, not gigabytes.
- `check_output_dir`: an output folder (--report-dir, --state-dir, render --out) is made and proved writable before
  anything builds, not discovered read-only after an hour of building.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from imagebuild.errors import UsageError
from imagebuild.units import format_size

MAX_INPUT_BYTES = 4 << 20  # a record or report larger than this is not one we wrote (ours: tens to hundreds of KB)
MAX_CA_BYTES = 4 << 20
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=\s]*?)-----END CERTIFICATE-----")


class FileProblem(UsageError):
    """A file that cannot be used, said in one line that names it (exit 2, bad input)."""


def write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_bounded(path: Path, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of `path`, at most `limit` of them; FileProblem naming `what` when unreadable or larger."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except IsADirectoryError:
        raise FileProblem(f"{path}: is a folder, not a {what}") from None
    except OSError as exc:
        raise FileProblem(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise FileProblem(f"{path}: larger than {format_size(limit)}, not a {what} this tool wrote or reads")
    return data


def read_bounded_text(path: Path, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    data = read_bounded(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"{path}: the {what} is not UTF-8 text (byte {exc.start})") from None


def certificate_blocks(path: Path) -> bytes:
    """The CERTIFICATE PEM blocks of a CA file, each ending in a newline, nothing else (no private key, no text);
    FileProblem when the file is unreadable or holds no certificate."""
    data = read_bounded(Path(path), "file", MAX_CA_BYTES)
    blocks = [m.group(0) for m in _PEM_CERT.finditer(data) if m.group(1).strip()]
    if not blocks:
        raise FileProblem(f"{path}: holds no PEM certificate (no '-----BEGIN CERTIFICATE-----' block)")
    return b"".join(b.replace(b"\r\n", b"\n") + b"\n" for b in blocks)


YAML_MAX_NODES = 200_000  # nodes of the alias-expanded tree; the shipped matrices have a few hundred
YAML_MAX_DEPTH = 50
YAML_MAX_EVENTS = 200_000  # parser events (~ values written); composing that many takes ~0.5 s and ~50 MB here
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlTooBig(Exception):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


def compose_yaml(text: str) -> Any:
    """The node graph of `text` (None for an empty document), built only within the limits: the parser's events are
    counted first (lazily, so a file of millions of tiny values stops after YAML_MAX_EVENTS), then the composed graph
    is measured (yaml_shape_problem). YamlTooBig(line, why) over a limit; yaml.YAMLError when it is not YAML."""
    for n, event in enumerate(yaml.parse(text, Loader=_YAML_LOADER)):
        if n > YAML_MAX_EVENTS:
            line = event.start_mark.line + 1 if event.start_mark else 0
            raise YamlTooBig(line, f"more than {YAML_MAX_EVENTS} YAML values")
    node = yaml.compose(text, Loader=_YAML_LOADER)
    if node is not None and (too_big := yaml_shape_problem(node)) is not None:
        raise YamlTooBig(*too_big)
    return node


def yaml_shape_problem(node: Any) -> tuple[int, str] | None:
    """(line, why) when the tree `node` expands to (aliases and merge keys counted at every use) is larger than
    YAML_MAX_NODES, deeper than YAML_MAX_DEPTH or recursive; None when it is within them. Each node is visited once."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def measure(n: Any, depth: int) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if depth > YAML_MAX_DEPTH:
            raise _Shape(n, f"nested deeper than {YAML_MAX_DEPTH} levels")
        if key in open_nodes:
            raise _Shape(n, "an alias refers to a node that contains it (recursive alias)")
        total = 1
        if isinstance(n.value, list):  # MappingNode (pairs) or SequenceNode (items)
            open_nodes.add(key)
            for child in (c for item in n.value for c in (item if isinstance(item, tuple) else (item,))):
                total += measure(child, depth + 1)
                if total > YAML_MAX_NODES:
                    raise _Shape(n, f"expands to more than {YAML_MAX_NODES} values (aliases repeated inside aliases?)")
            open_nodes.discard(key)
        sizes[key] = total
        return total

    try:
        measure(node, 0)
    except _Shape as bad:
        return bad.node.start_mark.line + 1, bad.why
    return None


class _Shape(Exception):
    def __init__(self, node: Any, why: str) -> None:
        super().__init__(why)
        self.node, self.why = node, why


def check_output_dir(path: Path | str, what: str) -> Path:
    """Make `path` (and its parents) and prove a file can be written in it; FileProblem naming `what` otherwise."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise FileProblem(f"{what} {folder}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".imagebuild-write-check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise FileProblem(f"{what} {folder}: cannot write there ({exc.strerror or exc})") from None
    return folder
