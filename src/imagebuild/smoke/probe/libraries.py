"""libraries: one copy of each CUDA runtime, cuBLAS, cuDNN and NCCL shared library (filesystem walk + ldconfig -p),
and which package brought each copy.

Every copy counts, wherever a wheel put it: the nvidia-* wheels' `nvidia/<lib>/lib/`, a framework's own `lib/`, and
auditwheel's vendored `<pkg>.libs/` folders, whose file names carry a hash (`torchvision.libs/libcudart.41118559.so.12`
is a second CUDA runtime beside nvidia-cuda-runtime's `libcudart.so.12`). The package of a copy is the installed
distribution whose RECORD lists it, else the Debian package whose file list does, else "unowned".
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

from probe.sharedlibs import dist_owners

# lib<name>[.<hash>|-<hash>].so.<major>[.minor...]: auditwheel renames a vendored library with an 8-hex hash
_LIB = re.compile(r"^(?P<base>lib(?:cudnn[a-z0-9_]*|nccl|cublas|cublasLt|cudart))(?:[.-][0-9a-f]{8})?"
                  r"\.so\.(?P<major>\d+)(?:\.[0-9.]+)?$")
FAMILIES = ("cudnn", "nccl", "cublas", "cudart")
DPKG_INFO = "/var/lib/dpkg/info"


def library_key(filename: str) -> str | None:
    """`libcudnn_ops.so.9.10.2` -> `libcudnn_ops.so.9`; `libcudart.41118559.so.12` -> `libcudart.so.12`;
    `libnccl.so.2` -> `libnccl.so.2`; others -> None."""
    m = _LIB.match(filename)
    return f"{m.group('base')}.so.{m.group('major')}" if m else None


def library_family(key: str) -> str:
    """One of FAMILIES: `libcublasLt.so.12` -> cublas."""
    return next(f for f in FAMILIES if key.startswith("lib" + f))


def deb_owners(paths, info_dir: str = DPKG_INFO) -> dict[str, str]:
    """{path: "deb <package>"} for the `paths` a Debian package's file list (/var/lib/dpkg/info/*.list) names
    (compared by real path: /lib is /usr/lib on merged-/usr systems)."""
    wanted = {os.path.realpath(p): p for p in paths}
    out: dict[str, str] = {}
    for lst in sorted(glob.glob(os.path.join(info_dir, "*.list"))):
        pkg = os.path.basename(lst)[:-len(".list")].split(":", 1)[0]
        try:
            with open(lst, errors="replace") as fh:
                for line in fh:
                    real = os.path.realpath(line.rstrip("\n"))
                    if real in wanted and wanted[real] not in out:
                        out[wanted[real]] = f"deb {pkg}"
        except OSError:
            continue
    return out


def owners_of(copies: dict, wheel_owners: dict, info_dir: str = DPKG_INFO) -> dict[str, str]:
    """{real path of each copy: the distribution (RECORD), the Debian package, or "unowned"}."""
    paths = sorted({p for v in copies.values() for p in v})
    debs = deb_owners([p for p in paths if p not in wheel_owners], info_dir)
    return {p: wheel_owners.get(p) or debs.get(p) or "unowned" for p in paths}


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


def walk_libraries(roots) -> list[tuple[str, str]]:
    """[(path, real path)] of every CUDA library file (library_key) under `roots`, each directory walked once."""
    entries: list[tuple[str, str]] = []
    seen_dirs: set[str] = set()
    skip = {"/proc", "/sys", "/dev"}

    def walk(top):
        real_top = os.path.realpath(top)
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
    return entries


def ldconfig_libraries() -> list[str]:
    """The CUDA libraries the loader cache (`ldconfig -p`) names."""
    for cand in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([cand, "-p"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        return [x for x in parse_ldconfig(out.stdout) if library_key(os.path.basename(x))]
    return []


def run(p):
    roots = ["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local", "/opt"]
    try:
        import site

        roots += site.getsitepackages() + [site.getusersitepackages()]
    except Exception:
        pass
    roots += [d for d in sys.path if d and os.path.isdir(d)]
    entries = walk_libraries(roots)
    ld = ldconfig_libraries()
    entries += [(x, os.path.realpath(x)) for x in ld if os.path.exists(x)]
    copies = group_library_copies(entries)
    owners = owners_of(copies, dist_owners())
    p.doc["libraries"] = {
        "copies": copies,
        "owners": owners,
        "counts": {k: len(v) for k, v in copies.items()},
        "ldconfig": sorted(set(ld)),
        "searched": sorted({os.path.realpath(r) for r in roots if os.path.isdir(r)}),
    }
    dup = {k: v for k, v in copies.items() if len(v) > 1}
    if dup:
        p.check("libraries.one_copy", "failed", "; ".join(describe_copies(k, v, owners) for k, v in dup.items()),
                copies=copies, owners=owners)
    else:
        p.check("libraries.one_copy", "passed",
                "one copy of each" if copies else "no CUDA runtime/cuDNN/NCCL/cuBLAS libraries in the image",
                counts={k: len(v) for k, v in copies.items()}, owners=owners)


def describe_copies(key: str, paths, owners: dict) -> str:
    """`libcudart.so.12: 2 copies (/a/libcudart.so.12 from nvidia-cuda-runtime-cu12, ... from torchvision)`."""
    return f"{key}: {len(paths)} copies (" + ", ".join(f"{x} from {owners.get(x, 'unowned')}" for x in paths) + ")"
