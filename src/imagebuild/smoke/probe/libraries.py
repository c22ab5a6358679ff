"""libraries: one copy of each cuDNN/NCCL/cuBLAS shared library (filesystem walk + ldconfig -p)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

_LIB = re.compile(r"^(?P<base>lib(?:cudnn[a-z0-9_]*|nccl|cublas|cublasLt))\.so\.(?P<major>\d+)(?:\.[0-9.]+)?$")


def library_key(filename: str) -> str | None:
    """`libcudnn_ops.so.9.10.2` -> `libcudnn_ops.so.9`; `libnccl.so.2` -> `libnccl.so.2`; others -> None."""
    m = _LIB.match(filename)
    return f"{m.group('base')}.so.{m.group('major')}" if m else None


def library_family(key: str) -> str:
    return "cudnn" if key.startswith("libcudnn") else ("nccl" if key.startswith("libnccl") else "cublas")


def group_library_copies(entries) -> dict:
    """[(path, realpath)] -> {"libcudnn.so.9": [realpath, ...]}: copies counted once per real file."""
    out: dict[str, set] = {}
    for path, real in entries:
        key = library_key(os.path.basename(path))
        if key:
            out.setdefault(key, set()).add(real)
    return {k: sorted(v) for k, v in sorted(out.items())}


def parse_ldconfig(text: str) -> list[str]:
    """`ldconfig -p` -> library paths."""
    paths = []
    for line in text.splitlines():
        if "=>" in line:
            paths.append(line.split("=>", 1)[1].strip())
    return paths


def run(p):
    roots = ["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local", "/opt"]
    try:
        import site

        roots += site.getsitepackages() + [site.getusersitepackages()]
    except Exception:
        pass
    roots += [p for p in sys.path if p and os.path.isdir(p)]
    entries = []
    seen_dirs = set()
    skip = {"/proc", "/sys", "/dev"}

    def walk(top):
        try:
            real_top = os.path.realpath(top)
        except OSError:
            return
        if real_top in seen_dirs or real_top in skip:
            return
        seen_dirs.add(real_top)
        try:
            it = os.scandir(top)
        except OSError:
            return
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        walk(e.path)
                    elif e.name.startswith("lib") and ".so." in e.name and library_key(e.name):
                        if os.path.exists(e.path):
                            entries.append((e.path, os.path.realpath(e.path)))
                except OSError:
                    continue

    for r in roots:
        if os.path.isdir(r):
            walk(r)
    ld = []
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20)
        ld = [p for p in parse_ldconfig(out.stdout) if library_key(os.path.basename(p))]
    except (OSError, subprocess.SubprocessError):
        for cand in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
            try:
                out = subprocess.run([cand, "-p"], capture_output=True, text=True, timeout=20)
                ld = [p for p in parse_ldconfig(out.stdout) if library_key(os.path.basename(p))]
                break
            except (OSError, subprocess.SubprocessError):
                continue
    for p in ld:
        if os.path.exists(p):
            entries.append((p, os.path.realpath(p)))
    copies = group_library_copies(entries)
    p.doc["libraries"] = {
        "copies": copies,
        "counts": {k: len(v) for k, v in copies.items()},
        "ldconfig": sorted(set(ld)),
        "searched": sorted({os.path.realpath(r) for r in roots if os.path.isdir(r)}),
    }
    dup = {k: v for k, v in copies.items() if len(v) > 1}
    if dup:
        p.check("libraries.one_copy", "failed",
                   "; ".join(f"{k}: {len(v)} copies ({', '.join(v)})" for k, v in dup.items()), copies=copies)
    else:
        p.check("libraries.one_copy", "passed",
                   "one copy of each" if copies else "no cuDNN/NCCL/cuBLAS libraries in the image",
                   counts={k: len(v) for k, v in copies.items()})
