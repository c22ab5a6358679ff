"""cudalibs: one NCCL, the right one, and one CUDA major across the nvidia-* wheels, cuDNN and cuBLAS. No GPU needed.

- nccl_one: exactly one libnccl.so.<N> in the image (the copies libraries.py finds: the wheels' folders, system
  paths, the loader cache), each named with the version its own ncclGetVersion answers (ctypes; no GPU needed).
- nccl_version: that version equals the NCCL torch was built against (torch.cuda.nccl.version(), a build-time
  value), what torch's own metadata requires (`Requires-Dist: nvidia-nccl-cu12==2.27.5`) and the installed
  nvidia-nccl wheel; the matrix pin (`--expect nccl=`, the io.imagebuild.nccl label) is compared by the suite.
- majors: the nvidia-* wheels are all of one CUDA major (a -cu12 and a -cu13 NCCL side by side hung a 512-GPU run);
  cuDNN's major is one (torch's build, the nvidia-cudnn wheel, the libcudnn files) and so is cuBLAS's (torch's
  CUDA, the nvidia-cublas wheel, the libcublas files).
Each mismatch names both sides. The pure rules below take plain values, so unit tests feed them real wheels' files.
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any

from probe.common import NO_TORCH, Probe

_SUFFIX = re.compile(r"-cu(\d+)$")
_LAYOUT = re.compile(r"(?:^|/)nvidia/cu(\d+)/")
_PIN = re.compile(r"^\s*(nvidia-[A-Za-z0-9_.-]+?)\s*==\s*([0-9][0-9A-Za-z.+]*)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def nccl_version_of(code: int) -> str:
    """ncclGetVersion's code -> dotted: 22705 -> 2.27.5 (NCCL >= 2.9: major*10000 + minor*100 + patch), 2708 ->
    2.7.8 (before: major*1000 + minor*100 + patch)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def library_nccl_version(path: str) -> tuple[str | None, str | None]:
    """(version, None) from the library's own ncclGetVersion, or (None, why it does not answer)."""
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        rc = lib.ncclGetVersion(ctypes.byref(code))
    except (OSError, AttributeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300]
    if rc != 0:
        return None, f"ncclGetVersion returned {rc}"
    return nccl_version_of(code.value), None


def same_version(a: str | None, b: str | None) -> bool:
    """Equal on the fields both name: 2.27.5 ~ 2.27.5.1 (a wheel's build number), 2.27.5+cuda12.9 ~ 2.27.5."""
    if not a or not b:
        return False
    pa, pb = (re.split(r"[.+]", str(v).split("+")[0]) for v in (a, b))
    n = min(len(pa), len(pb), 3)
    return pa[:n] == pb[:n]


def torch_pins(requires) -> dict[str, str]:
    """{nvidia-* name: version} from torch's `Requires-Dist` lines (`nvidia-nccl-cu12==2.27.5; platform_system...`)."""
    out = {}
    for line in requires or ():
        m = _PIN.match(str(line))
        if m:
            out[_norm(m.group(1))] = m.group(2)
    return out


def one_nccl(copies: dict) -> tuple[str, str]:
    """(status, reason) for {path: (version or None, error or None, owner)} of the libnccl.so.N copies."""
    def named(path):
        version, error, owner = copies[path]
        return f"{path} ({owner}): " + (f"NCCL {version}" if version else f"does not load: {error}")
    if len(copies) > 1:
        return "failed", f"{len(copies)} copies of libnccl can load: " + "; ".join(named(x) for x in sorted(copies))
    if not copies:
        return "failed", "no libnccl.so in the image"
    path = next(iter(copies))
    return ("passed" if copies[path][0] else "failed"), "one copy: " + named(path)


def nccl_agreement(library: str | None, built: str | None, pins: dict, dists: dict) -> tuple[str, str]:
    """(status, reason): the loadable libnccl's version against torch's build, torch's pin and the wheel."""
    sides = [("torch was built against NCCL", built)]
    sides += [(f"torch requires {name}==", v) for name, v in sorted(pins.items()) if name.startswith("nvidia-nccl")]
    sides += [(f"{name} installed", v) for name, v in sorted(dists.items()) if name.startswith("nvidia-nccl")]
    if not library:
        return "failed", "no loadable libnccl answers ncclGetVersion; " + ", ".join(f"{k} {v}" for k, v in sides if v)
    wrong = [f"libnccl is {library}, {k} {v}" for k, v in sides if v and not same_version(library, v)]
    if wrong:
        return "failed", "; ".join(wrong)
    return "passed", f"libnccl {library} = " + ", ".join(f"{k} {v}" for k, v in sides if v)


def dist_cuda_major(name: str, files=()) -> str | None:
    """The CUDA major of an nvidia-* wheel: its -cuNN suffix, else its nvidia/cuNN/ folder (CUDA 13's wheels drop
    the suffix), else None."""
    m = _SUFFIX.search(_norm(name))
    if m:
        return m.group(1)
    for f in files:
        m = _LAYOUT.search(str(f))
        if m:
            return m.group(1)
    return None


def mixed_majors(dist_majors: dict) -> str | None:
    """Why {dist: CUDA major or None} mixes CUDA majors, else None."""
    by_major: dict = {}
    for name, major in sorted(dist_majors.items()):
        if major:
            by_major.setdefault(major, []).append(name)
    if len(by_major) < 2:
        return None
    return "nvidia-* wheels of CUDA " + " and CUDA ".join(f"{m} ({', '.join(n)})" for m, n in sorted(by_major.items()))


def one_major(what: str, sides) -> str | None:
    """Why the [(who, major or None)] of `what` disagree, else None: `cuDNN: torch was built against 9, libcudnn.so.8
    found`."""
    known = [(who, str(m)) for who, m in sides if m not in (None, "")]
    if len({m for _, m in known}) < 2:
        return None
    return f"{what} majors differ: " + ", ".join(f"{who} {m}" for who, m in known)


def installed(path=None) -> tuple[dict, dict, dict]:
    """({nvidia-* wheel: version}, {nvidia-* wheel: CUDA major}, torch's nvidia-* pins) of this python's site
    directories (or of those in `path`)."""
    from importlib import metadata

    dists, majors, pins = {}, {}, {}
    for dist in (metadata.distributions() if path is None else metadata.distributions(path=list(path))):
        meta: Any = dist.metadata  # an email.message.Message: .get() answers None for a missing field
        name = _norm(meta.get("Name") or "")
        if name.startswith("nvidia-"):
            dists[name] = dist.version
            majors[name] = dist_cuda_major(name, dist.files or ())
        elif name == "torch":
            pins = torch_pins(dist.requires)
    return dists, majors, pins


def library_copies(roots, ldconfig=()) -> dict:
    """{"libnccl.so.2": [real path...], "libcudnn.so.9": [...], ...}: libraries.py's walk of `roots` plus the loader
    cache's entries."""
    from probe.libraries import group_library_copies, walk_libraries

    return group_library_copies(walk_libraries(roots) + [(x, os.path.realpath(x)) for x in ldconfig
                                                           if os.path.exists(x)])


def run(p: Probe) -> None:
    torch = p.import_torch()
    if torch is None:
        for name in ("nccl_one", "nccl_version", "majors"):
            p.check(f"cudalibs.{name}", "skipped", NO_TORCH)
        return
    from probe.libraries import ldconfig_libraries
    from probe.sharedlibs import dist_owners, site_roots

    roots = ["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local", "/opt"] + site_roots()
    report(p, torch, installed(), library_copies(roots, ldconfig_libraries()), dist_owners())


def report(p: Probe, torch, wheels: tuple[dict, dict, dict], copies: dict, owners: dict) -> None:
    """The three cudalibs checks from what run() gathered: installed()'s wheels, library_copies(), owners."""
    dists, majors, pins = wheels
    cuda = getattr(torch.version, "cuda", None)
    built = None
    if cuda:
        try:
            nv = torch.cuda.nccl.version()
            built = ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
        except Exception:
            built = None
    nccl = {path: (*library_nccl_version(path), owners.get(path, "unowned"))
            for key, paths in copies.items() if key.startswith("libnccl.") for path in paths}
    loaded = [v for v, _, _ in nccl.values() if v]
    p.doc["cudalibs"] = {"nccl_copies": {k: {"version": v, "error": e, "owner": o} for k, (v, e, o) in nccl.items()},
                         "torch_nccl": built, "torch_pins": pins, "nvidia_dists": dists, "dist_majors": majors}
    if not cuda:
        why = f"no NCCL: torch {torch.__version__} is built without CUDA"
        p.check("cudalibs.nccl_one", *(one_nccl(nccl) if nccl else ("skipped", why)))
        p.check("cudalibs.nccl_version", "skipped", why)
    else:
        p.check("cudalibs.nccl_one", *one_nccl(nccl), copies=len(nccl))
        p.check("cudalibs.nccl_version", *nccl_agreement(loaded[0] if len(loaded) == 1 else None, built, pins, dists),
                library=loaded[0] if len(loaded) == 1 else None, built=built)
    problems = [x for x in (mixed_majors(majors), *_lib_majors(torch, cuda, copies, dists)) if x]
    if problems:
        p.check("cudalibs.majors", "failed", "; ".join(problems), dist_majors=majors)
    elif not dists and not cuda:
        p.check("cudalibs.majors", "skipped", f"no nvidia-* wheels and torch {torch.__version__} is built without "
                "CUDA: no CUDA libraries to compare")
    else:
        found = sorted({m for m in majors.values() if m})
        p.check("cudalibs.majors", "passed", f"one CUDA major: {', '.join(found) or 'none named'} across "
                f"{len(dists)} nvidia-* wheels" + (f", torch's CUDA {cuda}" if cuda else ""), dist_majors=majors)


def _lib_majors(torch, cuda, copies: dict, dists: dict) -> list:
    """The cuDNN and cuBLAS disagreements (None for each that agrees)."""
    cudnn_built = None
    try:
        v = torch.backends.cudnn.version() if cuda else None
        cudnn_built = (v // 10000 if v >= 90000 else v // 1000) if v else None
    except Exception:
        pass

    def files(prefix):
        return [(f"{k} found", k.rsplit(".", 1)[-1]) for k in copies if k.startswith(prefix)]

    def wheel(prefix):
        return [(f"{n} {v} installed", v.split(".")[0]) for n, v in dists.items() if n.startswith(prefix)]

    cudnn = [("torch was built against cuDNN", cudnn_built), *wheel("nvidia-cudnn"), *files("libcudnn")]
    cublas = [("torch's CUDA", cuda.split(".")[0] if cuda else None), *wheel("nvidia-cublas"), *files("libcublas")]
    return [one_major("cuDNN", cudnn), one_major("cuBLAS", cublas)]
