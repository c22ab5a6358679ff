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

from probe.common import Probe
from probe.elf import elf_dynamic
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


def run(p: Probe) -> None:
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
    if dup and p.host:
        _on_a_host(p, dup, copies, owners, ld)
    elif dup:
        p.check("libraries.one_copy", "failed", "; ".join(describe_copies(k, v, owners) for k, v in dup.items()),
                copies=copies, owners=owners)
    else:
        p.check("libraries.one_copy", "passed",
                "one copy of each" if copies else "no CUDA runtime/cuDNN/NCCL/cuBLAS libraries in the image",
                counts={k: len(v) for k, v in copies.items()}, owners=owners)


# On a bare host (scripts/gpu-probe.sh: `--host`) a second copy of a library is common (NVIDIA's .debs beside the
# pip wheels) and not by itself a defect: what matters is which copy torch loads and whether another copy can end
# up in the same process. The dynamic loader keeps one object per SONAME, so a copy with torch's SONAME is loaded
# instead of torch's (it shadows it: found earlier on the search path, LD_LIBRARY_PATH before a RUNPATH) or not at
# all; a copy with a SONAME of its own (auditwheel's vendored `libcudart.41118559.so.12`) is loaded beside it.
LOADED = "loaded by torch"
SHADOWS = "can shadow torch's copy"
BESIDE = "loads beside torch's copy"
UNUSED = "not loaded by torch"


def mapped_paths(maps_text: str) -> set[str]:
    """The real paths of the files /proc/<pid>/maps shows mapped."""
    out = set()
    for line in maps_text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            out.add(os.path.realpath(fields[5].strip()))
    return out


def read_maps() -> str:
    """This process's /proc/self/maps ("" where there is none)."""
    try:
        with open("/proc/self/maps") as fh:
            return fh.read()
    except OSError:
        return ""


def classify_copy(path: str, soname: str | None, loaded_soname: str | None, loaded: set[str],
                  ld_library_path: list[str], ldconfig: list[str]) -> tuple[str, str]:
    """(one of LOADED/SHADOWS/BESIDE/UNUSED, why) for one copy of a library on a bare host. `loaded_soname` is the
    SONAME of the copy torch loaded (None when torch loaded none of them: then nothing can be said to shadow it)."""
    if path in loaded:
        return LOADED, "mapped in the probe's process after import torch"
    if soname and loaded_soname and soname != loaded_soname:
        return BESIDE, f"SONAME {soname} differs from the loaded copy's {loaded_soname}: a process can map both"
    here = os.path.dirname(path)
    if any(os.path.realpath(d) == here for d in ld_library_path if d):
        return SHADOWS, "its folder is on LD_LIBRARY_PATH, searched before torch's RUNPATH"
    if path in {os.path.realpath(x) for x in ldconfig}:
        return UNUSED, "in the loader cache (ldconfig -p), searched after torch's own RUNPATH"
    return UNUSED, "on no search path of the loader: loaded only by its full path"


def _on_a_host(p: Probe, dup: dict, copies: dict, owners: dict, ldconfig: list[str]) -> None:
    """libraries.one_copy on a bare host: name the copy torch loads and why each other copy does not (or can) load;
    fail only when two copies are, or can be, mapped in one process."""
    loaded = mapped_paths(read_maps()) if p.import_torch() is not None else set()
    ld_path = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    verdicts: dict[str, list[dict]] = {}
    together = []
    for key, paths in dup.items():
        sonames = {x: (elf_dynamic(x) or {}).get("soname") for x in paths}
        mine = [x for x in paths if x in loaded]
        loaded_soname = sonames[mine[0]] if mine else None
        rows = []
        for x in paths:
            how, why = classify_copy(x, sonames[x], loaded_soname, loaded, ld_path, ldconfig)
            rows.append({"path": x, "owner": owners.get(x, "unowned"), "soname": sonames[x], "status": how,
                         "why": why})
        verdicts[key] = rows
        if len(mine) > 1 or any(r["status"] == BESIDE for r in rows):
            together.append(key)
    p.doc.setdefault("libraries", {})["host_copies"] = verdicts

    def line(key):
        return f"{key}: " + "; ".join(f"{r['path']} ({r['owner']}) {r['status']}: {r['why']}" for r in verdicts[key])

    if together:
        p.check("libraries.one_copy", "failed", " | ".join(line(k) for k in together), copies=copies,
                host_copies=verdicts)
    else:
        p.check("libraries.one_copy", "passed", "a bare host: one copy of each loads | "
                + " | ".join(line(k) for k in dup), copies=copies, host_copies=verdicts)


def describe_copies(key: str, paths, owners: dict) -> str:
    """`libcudart.so.12: 2 copies (/a/libcudart.so.12 from nvidia-cuda-runtime-cu12, ... from torchvision)`."""
    return f"{key}: {len(paths)} copies (" + ", ".join(f"{x} from {owners.get(x, 'unowned')}" for x in paths) + ")"
