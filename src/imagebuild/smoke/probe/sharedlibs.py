"""ldd: every shared library under site-packages resolves its dependencies (the ldd scan opendatahub's notebooks run).

The image's own `ldd` (or its dynamic loader's `--list`) resolves each library the way the loader will: RPATH and
RUNPATH (`$ORIGIN/../../nvidia/cublas/lib` in torch's CUDA wheels), LD_LIBRARY_PATH, the ld.so cache. A dependency
ldd cannot find for a library on its own still counts as found when the image loads it some other way:

- through a parent: library Y (scanned too) needs X, and `ldd Y` resolves X and X's dependency. That is what the
  loader does when X comes in as Y's dependency: Y's DT_RPATH applies to the whole chain below it, and a soname
  already loaded is reused;
- through torch's preload: `import torch` loads torch/lib/libtorch_global_deps.so with RTLD_GLOBAL, so every soname
  in its resolved closure is visible to later loads by name.

- after its package's imports: what is still unresolved is loaded for real in a child process that first imports
  what the library's package imports (torchaudio's _torchaudio.so has no RPATH/RUNPATH and NEEDs libtorch.so, there
  once torch is imported; probe/loading.py).

All are listed in the figures (`rescued`) so they stay visible. A library built for another machine than the
interpreter's is not scanned: check ldd.machine fails on it (by_machine). Without a GPU in the container the driver's
libcuda.so.1 and libnvidia-ml.so.1 (mounted at run time by the NVIDIA container toolkit) may be missing; and a
dlopen-only plugin may miss a cluster's MPI/fabric libraries (linking.FABRIC_LIBS: listed, not failed). Nothing else.
The rules are in probe/linking.py, the ELF reading in probe/elf.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

from probe.common import Probe, finish_process, start_process, which
from probe.elf import ET_DYN, elf_dynamic, elf_header, machine_name, search_path_note
from probe.linking import (
    DRIVER_LIBS,
    PRELOAD_LIB,
    SO_NAME,
    evaluate,
    parse_ldd,
    plugins,
    split_optional,
    where_found,
)
from probe.loading import confirm_by_loading


def dist_owners(path=None) -> dict[str, str]:
    """{real path of a shared library: the installed distribution whose RECORD lists it} (of this Python, or of the
    site directories in `path`). The nvidia-* wheels all ship nvidia/__init__.py, so directories alone cannot tell
    nvidia-cublas from nvidia-cusparse."""
    from importlib import metadata

    out: dict[str, str] = {}
    dists = metadata.distributions() if path is None else metadata.distributions(path=list(path))
    for dist in dists:
        try:
            files = dist.files or []
            name = dist.metadata["Name"] or "?"
        except Exception:
            continue
        for f in files:
            if SO_NAME.search(str(f)):
                try:
                    out[os.path.realpath(str(dist.locate_file(f)))] = name
                except Exception:
                    continue
    return out


def site_roots() -> list[str]:
    import site
    import sysconfig

    roots = []
    cands = list(getattr(site, "getsitepackages", lambda: [])()) + [sysconfig.get_paths().get(k, "")
                                                                    for k in ("purelib", "platlib")]
    for d in cands:
        if d and os.path.isdir(d):
            real = os.path.realpath(d)
            if real not in roots:
                roots.append(real)
    return roots


def find_libraries(roots) -> tuple[list[str], dict[str, list[str]]]:
    """(ELF shared objects under `roots` as real paths, {basename: [paths]} of every .so name incl. symlinks)."""
    libs: list[str] = []
    names: dict[str, list[str]] = {}
    seen = set()
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                if not SO_NAME.search(f):
                    continue
                path = os.path.join(dirpath, f)
                names.setdefault(f, []).append(path)
                if os.path.islink(path):
                    continue
                real = os.path.realpath(path)
                if real not in seen:
                    seen.add(real)
                    libs.append(real)
    return sorted(libs), names


def by_machine(libs, me) -> tuple[list[str], dict[str, str]]:
    """(the shared objects built for this machine, {path: machine} of those built for another). `me` is the Python
    interpreter's elf_header(): its class, byte order and machine are what every library it loads must have."""
    ours, foreign = [], {}
    for lib in libs:
        h = elf_header(lib)
        if h is None or h[2] != ET_DYN:
            continue
        if me is None or h[:2] + h[3:] == me[:2] + me[3:]:
            ours.append(lib)
        else:
            foreign[lib] = machine_name(h)
    return ours, foreign


def machine_check(p: Probe, ours: list[str], foreign: dict[str, str], me, rel) -> None:
    """ldd.machine: no shared library under site-packages is built for another machine. A wheel of the other
    platform (a wheelhouse or `pip download --platform` of the wrong architecture, an amd64 layer in an arm64 image)
    installs without complaint and fails only when the library is loaded, which a smoke run may never do."""
    mine = machine_name(me) if me else "this machine"
    if foreign:
        p.check("ldd.machine", "failed", f"{len(foreign)} shared libraries under site-packages are built for another "
                f"machine than {mine}: " + "; ".join(f"{rel(k)} ({v})" for k, v in sorted(foreign.items())[:10]),
                machine=mine, foreign={rel(k): v for k, v in sorted(foreign.items())[:50]})
    else:
        p.check("ldd.machine", "passed", f"{len(ours)} shared libraries under site-packages, all built for {mine}",
                machine=mine, libraries=len(ours))


def ldd_command():
    """The image's ldd, else its dynamic loader's `--list` (what ldd runs), else None."""
    exe = which("ldd")
    if exe:
        return [exe]
    for cand in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib64/ld64.so.2",
                 "/lib/ld-linux-x86-64.so.2"):
        if os.path.exists(cand):
            return [cand, "--list"]
    return None


def driver_present() -> bool:
    """Did the NVIDIA container toolkit give this container a GPU (and so mount the driver's libraries)?"""
    return os.path.exists("/dev/nvidiactl")


LDD_TIMEOUT = 120


def _start(cmd, path):
    """`cmd path` started (output in files of its own), or the OSError that kept it from starting."""
    try:
        return start_process(cmd + [path])
    except OSError as exc:
        return exc


def _ldd(cmd, path, started=None):
    """ldd's view of `path` (`started`: its ldd, already started by _start)."""
    started = _start(cmd, path) if started is None else started
    rc, stdout, stderr = (None, "", "") if isinstance(started, OSError) else finish_process(started, LDD_TIMEOUT)
    if rc is None:
        error = started if isinstance(started, OSError) else subprocess.TimeoutExpired(cmd + [path], LDD_TIMEOUT)
        return {"resolved": {}, "missing": [], "version_errors": [], "dynamic": True, "error": str(error)}
    res = parse_ldd(stdout + "\n" + stderr)
    if rc != 0 and res["dynamic"] and not res["resolved"] and not res["missing"]:
        res["error"] = (stderr.strip() or f"exit {rc}")[-300:]
    return res


def ldd_all(cmd, libs, workers) -> dict:
    """{library: _ldd's view} of each of `libs`, `workers` ldd processes at a time: each writes to files of its own,
    read once it has ended (no thread waits on it)."""
    results: dict = {}
    running: list = []  # (library, its ldd started), oldest first
    for lib in libs:
        if len(running) == workers:
            done, started = running.pop(0)
            results[done] = _ldd(cmd, done, started)
        running.append((lib, _start(cmd, lib)))
    for done, started in running:
        results[done] = _ldd(cmd, done, started)
    return results


def run(p: Probe):
    roots = site_roots()
    libs, names = find_libraries(roots)
    me = elf_header(os.path.realpath(sys.executable))
    ours, foreign = by_machine(libs, me)

    def rel(path):
        for r in roots:
            if path.startswith(r + os.sep):
                return os.path.relpath(path, r)
        return path

    machine_check(p, ours, foreign, me, rel)
    cmd = ldd_command()
    if cmd is None:
        p.check("ldd.resolve", "skipped", "neither ldd nor a dynamic loader found in the image")
        return
    if not ours:
        p.check("ldd.resolve", "skipped", f"no shared libraries under {', '.join(roots) or 'site-packages'}",
                roots=roots)
        return
    workers = max(2, min(8, 2 * (os.cpu_count() or 1)))
    results = ldd_all(cmd, ours, workers)
    errors = {lib: r["error"] for lib, r in results.items() if r.get("error")}
    driver = driver_present()
    allowed = () if driver else DRIVER_LIBS
    preload_path = next((os.path.join(r, PRELOAD_LIB) for r in roots
                         if os.path.realpath(os.path.join(r, PRELOAD_LIB)) in results), None)
    preloaded = {}
    if preload_path:
        pre = results[os.path.realpath(preload_path)]
        preloaded = {s: PRELOAD_LIB for s in pre["resolved"]}
    problems, rescued = evaluate(results, allowed, preloaded)
    dyn = {lib: elf_dynamic(lib) for lib in ours}
    plugin_libs = plugins(dyn)
    problems, optional = split_optional(problems, plugin_libs)
    owners = dist_owners()
    if problems:
        problems, loaded = confirm_by_loading(problems, roots, owners, allowed, timeout=p.remaining(600))
        rescued += loaded
        # a dlopen'ed plugin whose other dependencies a real load found: what is left may be the cluster's stack
        # (CUDA 13's libcufile_rdma.so.1 needs libcufile.so.0, loaded by torch, and libibverbs.so.1)
        problems, more_optional = split_optional(problems, plugin_libs)
        optional += more_optional
    kinds = {"rpath": 0, "runpath": 0, "none": 0}
    into_other: dict[str, int] = {}  # RPATH/RUNPATH entries that leave the library's package (`$ORIGIN/../../nvidia/...`)
    for d in dyn.values():
        if not d:
            continue
        path = d["runpath"] if d["runpath"] is not None else d["rpath"]
        kinds["runpath" if d["runpath"] is not None else "rpath" if d["rpath"] is not None else "none"] += 1
        for entry in (path or "").split(":"):
            if entry.startswith("$ORIGIN/../") or entry.startswith("${ORIGIN}/../"):
                into_other[entry] = into_other.get(entry, 0) + 1
    found: dict[str, set] = {}
    for lib, res in results.items():
        for soname, dep in res["resolved"].items():
            found.setdefault(where_found(lib, os.path.realpath(dep), roots, owners), set()).add(soname)
    allowed_missing = sorted({s for r in results.values() for s in r["missing"] if s in allowed})
    figures = {
        "libraries": len(ours), "roots": roots, "ldd": " ".join(cmd), "driver_in_container": driver,
        "foreign_arch": [rel(x) for x in sorted(foreign)][:20],
        "found_in_system": sorted(found.pop("system", ())),
        "found_in_own_package": len(found.pop("own package", ())),
        "found_in_other_packages": {d: sorted(s) for d, s in sorted(found.items())},
        "rescued": [dict(r, library=rel(r["library"]), via=rel(r["via"])) for r in rescued][:50],
        "driver_libs_missing": allowed_missing,
        "torch_preload": {"library": rel(preload_path), "sonames": len(preloaded)} if preload_path else None,
        "plugins_needing_cluster_stack": {rel(x["library"]): x["missing"] for x in optional},
        "search_path_kinds": kinds,
        "origin_paths_out_of_package": dict(sorted(into_other.items(), key=lambda kv: (-kv[1], kv[0]))[:30]),
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
    }
    p.doc["ldd"] = dict(figures, problems=[dict(x, library=rel(x["library"])) for x in problems],
                        errors={rel(k): v for k, v in errors.items()})
    bad = []
    for x in problems:
        parts = []
        for s in x["missing"]:
            elsewhere = [rel(q) for q in names.get(s, [])]
            parts.append(f"{s} not found" + (f" (present at {', '.join(elsewhere[:2])}, not on its search path)"
                                              if elsewhere else ""))
        parts += [f"{v['version']} not found in {v['library']}" for v in x["version_errors"]]
        d = dyn.get(x["library"])
        direct = [s for s in x["missing"] if d and s in d["needed"]]
        how = search_path_note(d)
        if x["missing"] and how:
            how += ("; needed directly" if len(direct) == len(x["missing"]) else
                    "; needed by one of its dependencies" if not direct else "")
        load_note = (f"; load after import {', '.join(x['imported'])}: {x['load_error']}" if x.get("imported")
                     else f"; load: {x['load_error']}" if x.get("load_error") else "")
        bad.append(f"{rel(x['library'])}: {', '.join(parts)}" + (f" [{how}]" if how and x["missing"] else "")
                   + load_note)
    bad += [f"{rel(k)}: ldd failed: {v}" for k, v in sorted(errors.items())]
    note = (f"; without a GPU the driver's {', '.join(allowed_missing)} may be missing" if allowed_missing else "")
    if bad:
        p.check("ldd.resolve", "failed", f"{len(bad)} of {len(ours)} shared libraries under site-packages do not "
                f"resolve: " + "; ".join(bad[:10]) + note, **figures)
    else:
        extra = (f", {len({r['library'] for r in rescued})} through a parent, torch's preload or a real load after "
                 f"their package's imports" if rescued else "")
        if optional:
            extra += (f"; {len(optional)} dlopen'ed plugins need the cluster's own MPI/fabric stack when chosen ("
                      + ", ".join(f"{os.path.basename(x['library'])}: {'/'.join(x['missing'])}"
                                  for x in optional[:8]) + ")")
        p.check("ldd.resolve", "passed", f"{len(ours)} shared libraries resolve every dependency{extra}{note}",
                **figures)
