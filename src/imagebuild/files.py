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
- Writes never follow a symbolic link and never change a file in place: `write_bytes_atomic` creates its temporary
  file exclusively (O_CREAT|O_EXCL|O_NOFOLLOW) beside the target and renames it over the target, so a planted
  `X.tmp` link or a target that is a hard link to someone else's file is replaced, never written through;
  `write_inside(OUT, rel)` also refuses a symbolic link on any folder between OUT and the file, so nothing lands
  outside the output folder; `regular_file_inside` is the one test of "may the tool delete this earlier output"
  (render's manifest); `refuse_overlap` keeps an input (a wheelhouse) out of the folder an output is written to;
  `open_lock_file` opens a lock file without following a planted link (which "w" would truncate).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import yaml

from imagebuild.errors import UsageError
from imagebuild.units import format_size

MAX_INPUT_BYTES = 4 << 20  # a record or report larger than this is not one we wrote (ours: tens to hundreds of KB)
MAX_CA_BYTES = 4 << 20
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=\s]*?)-----END CERTIFICATE-----")


class FileProblem(UsageError):
    """A file that cannot be used, said in one line that names it (exit 2, bad input)."""


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """`path` holds `data` in one step: a temporary file created exclusively beside it (never an existing file or a
    link someone planted), then renamed over it (a link at `path` is replaced, not followed). OSError as raised."""
    path = Path(path)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, _NEW_FILE, 0o600)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def _symlink_below(root: Path, rel: Path) -> Path | None:
    """The first existing path between `root` (excluded) and `root/rel` (included) that is a symbolic link."""
    here = root
    for part in rel.parts:
        here = here / part
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return here
        except FileNotFoundError:
            return None
    return None


def _relative(rel: Path | str, what: str) -> Path:
    rel = Path(rel)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise FileProblem(f"{what}: {rel}: not a plain path inside the output folder")
    return rel


def make_dirs_inside(root: Path, rel: Path | str, what: str) -> Path:
    """`root/rel` as a folder, each missing part made; FileProblem when a part is a symbolic link or not a folder
    (writing through it could land outside `root`)."""
    rel = _relative(rel, what)
    here = Path(root)
    for part in rel.parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            try:
                os.mkdir(here)
            except OSError as exc:
                raise FileProblem(f"{what}: cannot make {here} ({exc.strerror or exc})") from None
            continue
        if stat.S_ISLNK(st.st_mode):
            raise FileProblem(f"{what}: {here} is a symbolic link; not writing through it (remove it)")
        if not stat.S_ISDIR(st.st_mode):
            raise FileProblem(f"{what}: {here} exists and is not a folder")
    return here


def write_inside(root: Path, rel: Path | str, data: bytes, what: str, mode: int = 0o644) -> Path:
    """Write `root/rel` atomically (write_bytes_atomic), its folders made without following a symbolic link out of
    `root`; an existing file there is replaced, never written into. FileProblem naming `what` when it cannot be."""
    rel = _relative(rel, what)
    parent = make_dirs_inside(root, rel.parent, what) if rel.parent != Path(".") else Path(root)
    target = parent / rel.name
    try:
        if stat.S_ISDIR(os.lstat(target).st_mode):
            raise FileProblem(f"{what}: {target} is a folder; not replacing it")
    except FileNotFoundError:
        pass
    try:
        write_bytes_atomic(target, data, mode)
    except OSError as exc:
        raise FileProblem(f"{what}: cannot write {target} ({exc.strerror or exc})") from None
    return target


def regular_file_inside(root: Path, rel: Path | str) -> bool:
    """Is `root/rel` a regular file reached without a symbolic link (so removing it removes nothing elsewhere)?"""
    rel = Path(rel)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or _symlink_below(Path(root), rel.parent):
        return False
    try:
        return stat.S_ISREG(os.lstat(Path(root) / rel).st_mode)
    except OSError:
        return False


def refuse_overlap(source: Path | str, source_what: str, output: Path | str, output_what: str) -> None:
    """FileProblem when an input folder and an output folder are one inside the other (after links are resolved):
    writing the output would delete or overwrite the input (bake's wheelhouse inside its own context)."""
    src, out = os.path.realpath(source), os.path.realpath(output)
    if src == out or src.startswith(out.rstrip("/") + "/") or out.startswith(src.rstrip("/") + "/"):
        raise FileProblem(f"{source_what} {source} and {output_what} {output} overlap (one is inside the other, "
                          "after symbolic links): writing the output would change the input; use separate folders")


def open_fresh_text(path: Path) -> IO[str]:
    """A new text file at `path` for streaming (a build or test log): an earlier file or a link at the name is
    removed first (the link, never what it points at), then the file is created exclusively (O_EXCL|O_NOFOLLOW), so
    the log never truncates or appends to someone else's file. OSError as raised."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
    fd = os.open(path, _NEW_FILE, 0o644)
    return os.fdopen(fd, "w", encoding="utf-8", errors="replace")


def open_lock_file(path: Path) -> IO[str]:
    """A lock file opened for flock without following a link planted at its name (which "w" would truncate)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                     0o644)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise FileProblem(f"{path}: cannot open the lock file ({why})") from None
    return os.fdopen(fd, "r+", encoding="utf-8")


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


def check_output_file(path: Path | str, what: str) -> Path:
    """Before any work (an image read, registry requests): `path` can be written as a file, i.e. it is not a folder
    and a file can be created in its folder (a read-only or missing folder is one line now, not after the work)."""
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        raise FileProblem(f"{what} {target}: is a folder; give a file name")
    folder = target.parent
    if not folder.is_dir():
        raise FileProblem(f"{what} {target}: folder {folder} does not exist")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".imagebuild-write-check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise FileProblem(f"{what} {target}: cannot write in {folder} ({exc.strerror or exc})") from None
    return target


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (layers and wheels are gigabytes: never whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_chunks(chunks: Iterable[bytes], on_bytes: Callable[[int], None] | None = None,
                buffer_size: int = 1 << 20) -> IO[bytes]:
    """A file object over an iterator of byte chunks (the SDK's `export()`/`save()` streams), read sequentially;
    `on_bytes(total)` after each read, with the bytes handed over so far."""
    import io

    class _ChunkReader(io.RawIOBase):
        def __init__(self) -> None:
            self._it = iter(chunks)
            self._buf = b""
            self.total = 0

        def readable(self) -> bool:
            return True

        def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
            while not self._buf:
                try:
                    self._buf = next(self._it)
                except StopIteration:
                    return 0
            n = min(len(b), len(self._buf))
            b[:n] = self._buf[:n]
            self._buf = self._buf[n:]
            self.total += n
            if on_bytes is not None:
                on_bytes(self.total)
            return n

    return io.BufferedReader(_ChunkReader(), buffer_size=buffer_size)
