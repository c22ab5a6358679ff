"""The rules of the ldd check, apart from running it: ldd output parsing, which missing dependency the image
satisfies some other way (a parent's DT_RPATH chain, torch's preload), which libraries are dlopen-only plugins,
and which wheel a resolved library belongs to. Standard library only."""

from __future__ import annotations

import os
import re

DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")  # come with the driver, not the image
# A cluster's communication stack (MPI, OpenSHMEM, PMIx, libfabric, UCX, RDMA verbs). torch's CUDA wheels pull in
# nvidia-nvshmem and nvidia-cufile, whose bootstrap/transport plugins (nvshmem_bootstrap_mpi.so.3 -> libmpi.so.40,
# nvshmem_transport_ucx.so.3 -> libucp.so.0, libcufile_rdma.so.1 -> libibverbs.so.1, ...) are dlopen'ed only when
# that stack is chosen, and must then be the cluster's own (nvshmem's MPI plugin even carries the RUNPATH of the MPI
# it was built against). Missing from a PLUGIN (a library nothing else NEEDs, not a Python extension) they are
# reported, not failed; missing from anything else they fail like any other library.
FABRIC_LIBS = frozenset({
    "libmpi.so.40", "libmpi.so.12", "liboshmem.so.40", "libpmix.so.2", "libpmi.so.0", "libpmi2.so.0",
    "libfabric.so.1", "libucp.so.0", "libucs.so.0", "libuct.so.0", "libucm.so.0",
    "libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libefa.so.1",
})
PRELOAD_LIB = os.path.join("torch", "lib", "libtorch_global_deps.so")
SO_NAME = re.compile(r"\.so(\.[0-9]+)*$")
_RESOLVED = re.compile(r"^(?P<name>\S+) => (?P<path>\S.*?) \(0x[0-9a-fA-F]+\)$")
_MISSING = re.compile(r"^(?P<name>\S+) => not found$")
_BARE = re.compile(r"^(?P<path>\S+) \(0x[0-9a-fA-F]+\)$")  # the interpreter (absolute) or the vDSO
_VERSION = re.compile(r"(?:^|: )(?P<lib>[^:\s]+): version `(?P<version>[^']+)' not found \(required by (?P<by>[^)]+)\)")


def parse_ldd(text: str) -> dict:
    """ldd / `ld.so --list` output -> {"resolved": {soname: path}, "missing": [soname], "version_errors": [...],
    "dynamic": bool}."""
    resolved: dict[str, str] = {}
    missing: list[str] = []
    version_errors: list[dict] = []
    dynamic = True
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if "not a dynamic executable" in line or line == "statically linked":
            dynamic = False
            continue
        m = _VERSION.search(line)
        if m:
            version_errors.append({"library": m.group("lib"), "version": m.group("version"),
                                   "required_by": m.group("by")})
            continue
        m = _MISSING.match(line)
        if m:
            if m.group("name") not in missing:
                missing.append(m.group("name"))
            continue
        m = _RESOLVED.match(line)
        if m:
            resolved[m.group("name")] = m.group("path")
            continue
        m = _BARE.match(line)
        if m and m.group("path").startswith("/"):
            resolved[os.path.basename(m.group("path"))] = m.group("path")
    return {"resolved": resolved, "missing": missing, "version_errors": version_errors, "dynamic": dynamic}


def evaluate(results: dict, allowed_missing=(), preloaded=None) -> tuple[list, list]:
    """`results`: {library realpath: parse_ldd(...)}. -> (problems, rescued).

    problems: [{"library", "missing": [soname], "version_errors": [...]}] for what no load path resolves.
    rescued:  [{"library", "soname", "via"}] for dependencies found only through a parent or torch's preload.
    Driver sonames in `allowed_missing` are neither.
    """
    loaded_by: dict[str, list[str]] = {}
    for parent, res in results.items():
        for path in res["resolved"].values():
            loaded_by.setdefault(os.path.realpath(path), []).append(parent)
    preloaded = preloaded or {}
    problems, rescued = [], []
    for lib, res in sorted(results.items()):
        unresolved = []
        for soname in res["missing"]:
            if soname in allowed_missing:
                continue
            via = next((y for y in sorted(loaded_by.get(lib, ())) if y != lib
                        and soname in results[y]["resolved"]), None)
            if via is None and soname in preloaded:
                via = f"torch preload ({preloaded[soname]})"
            if via is None:
                unresolved.append(soname)
            else:
                rescued.append({"library": lib, "soname": soname, "via": via})
        if unresolved or res["version_errors"]:
            problems.append({"library": lib, "missing": unresolved, "version_errors": res["version_errors"]})
    return problems, rescued


def _owner(root: str, rel: str) -> str:
    """The package a site-packages path belongs to: its top-level directory (auditwheel's vendored `numpy.libs`
    belongs to `numpy`), or two levels for a namespace package without __init__.py (`nvidia/cublas`)."""
    parts = rel.split(os.sep)
    top = parts[0][:-len(".libs")] if parts[0].endswith(".libs") else parts[0]
    if len(parts) > 2 and not os.path.exists(os.path.join(root, parts[0], "__init__.py")):
        return f"{top}/{parts[1]}"
    return top


def is_extension(name: str) -> bool:
    """Could Python import this file as an extension module? Tagged suffixes (`.cpython-311-x86_64-linux-gnu.so`,
    `.abi3.so`) or a bare `.so` not named lib*; a versioned `libx.so.1` never."""
    from importlib.machinery import EXTENSION_SUFFIXES

    if any(name.endswith(sfx) for sfx in EXTENSION_SUFFIXES if sfx != ".so") or name.endswith(".abi3.so"):
        return True
    return name.endswith(".so") and not name.startswith("lib")


def plugins(dyn: dict) -> set:
    """Libraries (paths) that no scanned library NEEDs and Python cannot import: loaded only with dlopen."""
    needed = {n for d in dyn.values() if d for n in d["needed"]}
    out = set()
    for lib, d in dyn.items():
        name = os.path.basename(lib)
        soname = (d or {}).get("soname") or name
        if soname not in needed and name not in needed and not is_extension(name):
            out.add(lib)
    return out


def split_optional(problems: list, plugin_libs, optional=FABRIC_LIBS) -> tuple[list, list]:
    """(problems that fail the check, plugins whose only missing dependencies are a cluster stack's `optional`)."""
    keep, opt = [], []
    for x in problems:
        if x["library"] in plugin_libs and x["missing"] and not x["version_errors"] \
                and set(x["missing"]) <= set(optional):
            opt.append(x)
        else:
            keep.append(x)
    return keep, opt


def where_found(lib: str, dep: str, roots, owners=None) -> str:
    """"system", "own package", or the dependency's directory relative to site-packages (another wheel's dir,
    reached through RPATH/RUNPATH or LD_LIBRARY_PATH). `owners`: dist_owners(); the directory layout otherwise."""
    owners = owners or {}
    for root in roots:
        if dep.startswith(root + os.sep):
            rel_dep = os.path.relpath(dep, root)
            if owners.get(lib) and owners.get(dep):
                same = owners[lib] == owners[dep]
            else:
                same = lib.startswith(root + os.sep) and _owner(root, os.path.relpath(lib, root)) == _owner(root,
                                                                                                            rel_dep)
            return "own package" if same else (os.path.dirname(rel_dep) or ".")
    return "system"
