"""coverage: which GPUs the image's CUDA code runs on, read from the files (probe/fatbin.py), no GPU needed.

Every CUDA ELF under torch's folder and the site directories (torch's own libraries, the nvidia-* wheels',
transformer_engine's, any extension's) is read for the SASS architectures and PTX it carries. A target GPU (sm_XY)
runs a library natively when the library has SASS that runs on it, through PTX JIT when only its PTX can be
compiled for it, and not at all otherwise: the rule is gpu.arch_runs_on (sm_86 SASS runs on sm_89, sm_90a only on
sm_90, PTX on every GPU at least as new). The probe reads and reports; the target GPUs come from the suite's
expectations (`gpu_archs`, the io.imagebuild.gpu-archs label) and the GPUs a GPU host shows, and `imagebuild
coverage PATH --gpu sm_90` judges a wheel or a folder the same way (judge() below) before an image is built.
"""

from __future__ import annotations

import os
import re
import sys

from probe.common import NO_TORCH, Probe
from probe.fatbin import FatbinError, read_fatbin, sort_archs
from probe.gpu import arch_runs_on, normalize_arch

# a shared object by name: libfoo.so, libfoo.so.12, libfoo.so.12.9, _C.cpython-312-x86_64-linux-gnu.so
SO_NAME = re.compile(r"\.so(\.\d+)*$")
NATIVE, PTX_JIT, NO_CODE = "native", "ptx-jit", "none"


def how_it_runs(reading: dict, target: str) -> str:
    """NATIVE, PTX_JIT or NO_CODE: how a GPU of arch `target` (sm_XY) runs the code of one library's reading."""
    if arch_runs_on(target, reading.get("sass") or ()):
        return NATIVE
    if arch_runs_on(target, reading.get("ptx") or ()):
        return PTX_JIT
    return NO_CODE


def judge(libraries: dict, targets) -> dict:
    """{sm: {"runs": native|ptx-jit|none, "ptx_only": [lib...], "missing": [lib...]}} for each target over
    `libraries` ({path: reading}); a GPU runs natively only when every library has SASS for it."""
    out = {}
    for target in dict.fromkeys(normalize_arch(t) for t in targets):
        ptx_only, missing = [], []
        for path, reading in sorted(libraries.items()):
            how = how_it_runs(reading, target)
            if how == PTX_JIT:
                ptx_only.append(path)
            elif how == NO_CODE:
                missing.append(path)
        runs = NO_CODE if missing else PTX_JIT if ptx_only else NATIVE
        out[target] = {"runs": runs, "ptx_only": ptx_only, "missing": missing}
    return out


def failures(libraries: dict, verdicts: dict, shown=None) -> list[str]:
    """One line per library a target GPU cannot run: `libfoo.so.12 (nvidia-foo-cu12): no sm_100 SASS or PTX
    (has SASS sm_80 sm_90, PTX none)`. `shown`: {path: how to name it} (default: the path)."""
    lines = []
    for target, v in verdicts.items():
        for path in v["missing"]:
            r = libraries[path]
            lines.append(f"{(shown or {}).get(path, path)}: no {target} SASS or PTX (has SASS "
                         f"{' '.join(r.get('sass') or []) or 'none'}, PTX {' '.join(r.get('ptx') or []) or 'none'})")
    return lines


def summary(verdicts: dict) -> str:
    """`natively: sm_80, sm_90; only through PTX JIT: sm_120; not at all: sm_100`."""
    parts = []
    for label, runs in (("natively", NATIVE), ("only through PTX JIT", PTX_JIT), ("not at all", NO_CODE)):
        gpus = [t for t, v in verdicts.items() if v["runs"] == runs]
        if gpus:
            parts.append(f"{label}: {', '.join(gpus)}")
    return "; ".join(parts)


def scan(roots) -> tuple[dict, dict]:
    """({real path: reading} of every shared object with GPU code under `roots`, {real path: error} of those whose
    fatbin does not parse). Each directory and file once (symlinks resolved)."""
    found: dict = {}
    errors: dict = {}
    seen: set = set()
    for root in roots:
        for path in _shared_objects(root, seen):
            try:
                reading = read_fatbin(path)
            except (OSError, FatbinError) as exc:
                errors[path] = f"{type(exc).__name__}: {exc}"
                continue
            if reading is not None:
                found[path] = reading
    return found, errors


def _shared_objects(root: str, seen: set):
    if os.path.isfile(root):
        real = os.path.realpath(root)
        if real not in seen:
            seen.add(real)
            yield real
        return
    for top, dirs, files in os.walk(root, followlinks=False):
        real_top = os.path.realpath(top)
        if real_top in seen:
            dirs[:] = []
            continue
        seen.add(real_top)
        dirs.sort()
        for name in sorted(files):
            if SO_NAME.search(name):
                real = os.path.realpath(os.path.join(top, name))
                if real not in seen and os.path.isfile(real):
                    seen.add(real)
                    yield real


def _roots(torch) -> list[str]:
    roots = [os.path.dirname(os.path.abspath(torch.__file__))]
    try:
        import site

        roots += site.getsitepackages() + [site.getusersitepackages()]
    except Exception:
        pass
    roots += [d for d in sys.path if d and os.path.isdir(d) and d.rstrip("/").endswith("-packages")]
    return [r for r in dict.fromkeys(os.path.realpath(r) for r in roots) if os.path.isdir(r)]


def run(p: Probe) -> None:
    torch = p.import_torch()
    if torch is None:
        p.check("coverage.kernels", "skipped", NO_TORCH)
        return
    report(p, torch, _roots(torch))


def report(p: Probe, torch, roots) -> None:
    """coverage.kernels over the CUDA ELFs under `roots` (run: torch's folder and the site directories)."""
    cuda = getattr(torch.version, "cuda", None)
    libraries, errors = scan(roots)
    from probe.sharedlibs import dist_owners

    owners = dist_owners() if libraries or errors else {}
    doc = {"libraries": {k: dict(v, owner=owners.get(k, "unowned")) for k, v in libraries.items()},
           "errors": errors, "roots": roots, "torch_cuda": cuda,
           "sass": sort_archs({a for r in libraries.values() for a in r["sass"]}),
           "ptx": sort_archs({a for r in libraries.values() for a in r["ptx"]})}
    p.doc["coverage"] = doc
    if errors:
        p.check("coverage.kernels", "failed", "; ".join(f"{k} ({owners.get(k, 'unowned')}): GPU code unreadable: "
                                                        f"{v}" for k, v in sorted(errors.items()))[:2000])
        return
    if not cuda:  # never passed on a CPU torch, whatever else carries GPU code
        p.check("coverage.kernels", "skipped", f"no CUDA libraries: torch {torch.__version__} is built without CUDA"
                + (f" ({len(libraries)} other libraries carry GPU code)" if libraries else ""))
        return
    if not libraries:
        p.check("coverage.kernels", "failed", f"torch {torch.__version__} is built for CUDA {cuda}, but no library "
                f"under {', '.join(roots)} carries GPU code (SASS or PTX)")
        return
    facts = f"{len(libraries)} CUDA libraries read (SASS {' '.join(doc['sass']) or 'none'}; PTX " \
            f"{' '.join(doc['ptx']) or 'none'})"
    usable, _why = p.gpu_state()
    visible = []
    if usable:
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            visible.append(f"sm_{major}{minor}")
    verdicts = judge(libraries, visible)
    doc["visible"] = verdicts
    lost = failures(libraries, verdicts, {k: f"{k} ({owners.get(k, 'unowned')})" for k in libraries})
    if lost:
        p.check("coverage.kernels", "failed", "the visible GPU cannot run: " + "; ".join(lost)[:2000],
                visible=list(verdicts))
    else:
        p.check("coverage.kernels", "passed", facts + (f"; the visible GPUs run {summary(verdicts)}" if verdicts
                                                       else ""), libraries=len(libraries), visible=list(verdicts))
