"""The ldd check's second opinion: load a library for real, the way the image uses it.

`ldd` judges a library alone. A Python extension is never loaded alone: torchaudio's _torchaudio.so carries no RPATH
or RUNPATH and NEEDs libtorch.so, which it finds because `import torchaudio` imports torch first and libtorch.so is
then already in the process (the loader reuses a loaded soname). So a library ldd leaves unresolved is loaded in a
child process (a crash there cannot end the probe) after importing what its package imports: the top-level modules
of its distribution's requirements (RECORD and Requires-Dist say which), then its own top-level package. It counts
as resolved when ctypes.CDLL (dlopen with RTLD_NOW: every symbol bound) succeeds, or when every soname ldd missed
is already mapped in that process and the load failed only on the driver's (libcuda.so.1 ...), which a container
without a GPU does not have. A dependency that is really gone fails both ways.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from probe.common import RESULT_MARK
from probe.elf import elf_dynamic

# the child: import, note what is mapped, then load; one JSON line after RESULT_MARK (imports may print)
CHILD = r"""
import ctypes, importlib, json, sys
req = json.loads(sys.argv[1])
for root in req["path"]:
    if root not in sys.path:
        sys.path.append(root)
out = {"imports": {}, "mapped": [], "loads": {}}
for name in req["imports"]:
    try:
        importlib.import_module(name)
        out["imports"][name] = ""
    except BaseException as exc:
        out["imports"][name] = (type(exc).__name__ + ": " + str(exc))[:300]
try:
    with open("/proc/self/maps") as fh:
        out["mapped"] = sorted({line.split(None, 5)[5].strip() for line in fh if len(line.split(None, 5)) == 6
                                and line.split(None, 5)[5].startswith("/")})
except OSError:
    pass
for lib in req["libraries"]:
    try:
        ctypes.CDLL(lib)
        out["loads"][lib] = ""
    except OSError as exc:
        out["loads"][lib] = str(exc)[:500]
print(MARK + json.dumps(out), flush=True)
"""
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level(dist) -> list[str]:
    """The importable top-level names a distribution installs: top_level.txt, else its RECORD's first path parts
    (packages and modules; never *.dist-info, *.libs, __pycache__, bin or ../ paths)."""
    try:
        text = dist.read_text("top_level.txt")
    except Exception:
        text = None
    if text:
        return sorted({line.strip() for line in text.splitlines() if line.strip()})
    names = set()
    for f in dist.files or []:
        parts = str(f).replace("\\", "/").split("/")
        first = parts[0]
        if first in ("..", "__pycache__", "bin") or first.endswith((".dist-info", ".egg-info", ".libs", ".data")):
            continue
        if len(parts) > 1 or first.endswith(".py"):
            names.add(first[:-3] if first.endswith(".py") and len(parts) == 1 else first)
    return sorted(n for n in names if n.isidentifier())


def requirement_names(dist, extras: bool = False) -> list[str]:
    """The distribution names it requires unconditionally (Requires-Dist without an `extra ==` marker); with
    `extras`, those of its extras too."""
    out = []
    for req in dist.requires or []:
        name, _, marker = req.partition(";")
        if "extra" in marker and not extras:
            continue
        m = _REQ_NAME.match(name)
        if m:
            out.append(m.group(1))
    return out


def distributions() -> dict:
    """{canonical distribution name: Distribution} of this Python."""
    from importlib import metadata

    out: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
        except Exception:
            continue
        if name:
            out.setdefault(_canon(name), dist)
    return out


def imports_for(library: str, roots, owners: dict, dists: dict) -> list[str]:
    """What to import before loading `library`: the top-level modules of its distribution's requirements (torch
    for torchaudio), then its own top-level package (the directory under site-packages; `x.libs` -> `x`)."""
    names: list[str] = []
    dist = dists.get(_canon(owners.get(library, "")))
    if dist is not None:
        for req in requirement_names(dist):
            dep = dists.get(_canon(req))
            if dep is not None:
                names += [n for n in top_level(dep) if n not in names]
    for root in roots:
        if library.startswith(root + os.sep):
            first = os.path.relpath(library, root).split(os.sep)[0]
            own = first[:-len(".libs")] if first.endswith(".libs") else first
            if own.isidentifier() and own not in names and os.path.isdir(os.path.join(root, own)):
                names.append(own)
            break
    return names


def required_by(dists: dict) -> dict[str, set[str]]:
    """{canonical distribution name: the installed distributions that require it, their extras counted}."""
    out: dict[str, set[str]] = {}
    for name, dist in dists.items():
        for req in requirement_names(dist, extras=True):
            out.setdefault(_canon(req), set()).add(name)
    return out


def consumer_imports(library: str, owners: dict, dists: dict, requirers: dict, own_imports=()) -> list[str]:
    """What loads `library` in a job when its own package does not: the nearest distributions that require its
    distribution (through meta-packages and their extras: torch requires cuda-toolkit[cusolver], whose extra requires
    nvidia-cusolver), the first level up that installs importable modules. NVIDIA's CUDA 13 wheels share one lib
    directory without RUNPATH; libcusolverMg.so.12 resolves its libcublas.so.13 only once torch has loaded it.
    `requirers`: required_by(dists)."""
    owner = _canon(owners.get(library, ""))
    if not owner:
        return []
    seen, level = {owner}, {owner}
    while level:
        level = {r for name in level for r in requirers.get(name, ())} - seen
        seen |= level
        names = sorted({n for name in level for n in top_level(dists[name]) if n not in own_imports})
        if names:
            return names
    return []


def load_in_child(libraries, imports, roots, timeout: float) -> dict:
    """Run CHILD: -> {"imports": {name: error}, "mapped": [path], "loads": {library: error}} or {"error": text}."""
    req = json.dumps({"path": list(roots), "imports": list(imports), "libraries": list(libraries)})
    code = CHILD.replace("MARK", repr(RESULT_MARK))
    try:
        out = subprocess.run([sys.executable, "-c", code, req], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"load test timed out after {timeout:.0f} s"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
    return {"error": f"load test exited {out.returncode}: {tail}"[:800]}


def mapped_sonames(paths) -> set[str]:
    """Sonames of the files mapped in a process: their basenames and their DT_SONAME."""
    out = set()
    for path in paths:
        out.add(os.path.basename(path))
        dyn = elf_dynamic(path) if os.path.exists(path) else None
        if dyn and dyn.get("soname"):
            out.add(dyn["soname"])
    return out


def confirm_by_loading(problems: list, roots, owners: dict, allowed_missing=(), timeout: float = 300.0,
                       dists: dict | None = None) -> tuple[list, list]:
    """problems (linking.evaluate) -> (those still unresolved after a real load, rescued entries for the rest).

    Libraries are grouped by what they import first: one child process per group. A still-unresolved entry gains
    `load_error` (the loader's own words) and `imported` (what ran first)."""
    dists = distributions() if dists is None else dists
    groups: dict[tuple, list] = {}
    for x in problems:
        groups.setdefault(tuple(imports_for(x["library"], roots, owners, dists)), []).append(x)
    still, rescued = [], []
    for imports, members in groups.items():
        for x, err, left, how, failed_imports in _attempt(members, imports, roots, allowed_missing, timeout):
            saved = _rescue(x, err, left, how, allowed_missing)
            if saved:
                rescued += saved
            else:
                still.append(dict(x, missing=left or x["missing"], load_error=err, imported=list(imports),
                                  import_errors=failed_imports))
    if not still:
        return still, rescued
    # a second chance, the way a job loads it: after importing what requires its package
    requirers = required_by(dists)
    again: dict[tuple, list] = {}
    for x in still:
        more = consumer_imports(x["library"], owners, dists, requirers, x["imported"])
        if more:
            again.setdefault(tuple(x["imported"] + more), []).append(x)
    closer: dict[int, dict | None] = {}  # id(entry) -> its replacement (None: it loads now)
    for imports, members in again.items():
        for x, err, left, how, _ in _attempt(members, imports, roots, allowed_missing, timeout):
            saved = _rescue(x, err, left, how, allowed_missing)
            if saved:
                closer[id(x)] = None
                rescued += saved
            elif len(left) < len(x["missing"]):  # closer: say what is still missing, in the loader's words
                closer[id(x)] = dict(x, missing=left or x["missing"], load_error=err, imported=list(imports))
    kept = [closer.get(id(x), x) for x in still]
    return [x for x in kept if x is not None], rescued


def _rescue(x: dict, err: str, left: list, how: str, allowed_missing) -> list:
    """The rescued entries for `x` after one real load (one rule for both passes): it loaded; or it failed only on
    the driver's libraries (allowed without a GPU, the NVIDIA container toolkit mounts them) with every soname ldd
    missed now mapped. [] when it is still unresolved."""
    if err == "":
        via = "loads"
    elif not left and not x["version_errors"] and any(d in err for d in allowed_missing):
        via = "mapped"
    else:
        return []
    return [{"library": x["library"], "soname": s, "via": f"{via} {how}"} for s in x["missing"]]


def _attempt(members: list, imports: tuple, roots, allowed_missing, timeout: float):
    """Load `members` in one child after `imports`: per member (entry, the loader's error or "", the sonames ldd
    missed that are still not mapped and not allowed, how it was loaded, the imports that failed)."""
    res = load_in_child([x["library"] for x in members], imports, roots, timeout)
    mapped = mapped_sonames(res.get("mapped", ()))
    failed_imports = {k: v for k, v in (res.get("imports") or {}).items() if v}
    how = "after import " + ", ".join(imports) if imports else "on its own"
    for x in members:
        err = (res.get("loads") or {}).get(x["library"], res.get("error", "not loaded"))
        left = [s for s in x["missing"] if s not in mapped and s not in allowed_missing]
        yield x, err, left, how, failed_imports

