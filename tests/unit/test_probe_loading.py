"""The ldd check judges a library the way the image uses it (probe/loading.py): tiny libraries built with gcc here,
in a venv whose site-packages holds only them, scanned by the real probe (`--sections ldd`).

- a torchaudio-style extension: NEEDs a library with no RPATH/RUNPATH that is in the process only after its parent
  package is imported (the parent preloads it with RTLD_GLOBAL, as torch does with its libraries): passes;
- one whose dependency is really gone: fails, with the loader's own words.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import loading

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc is not installed (scripts/system-deps.sh)")

PARENT_INIT = """import ctypes, os
ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libibparent.so"), mode=ctypes.RTLD_GLOBAL)
"""


def _gcc(out: Path, source: str, *args: str) -> None:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True, capture_output=True)
    src.unlink()


def _dist(site: Path, name: str, files: list[str], requires: tuple[str, ...] = ()) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files + [f"{info.name}/METADATA"]))


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    return python, site


def _parent_and_child(site: Path, tmp_path: Path, child_imports_parent: bool) -> Path:
    lib = site / "ibparent" / "lib"
    lib.mkdir(parents=True)
    _gcc(lib / "libibparent.so", "int ibparent(void){return 41;}\n", "-Wl,-soname,libibparent.so")
    (site / "ibparent" / "__init__.py").write_text(PARENT_INIT)
    _dist(site, "ibparent", ["ibparent/__init__.py", "ibparent/lib/libibparent.so"])
    child = site / "ibchild"
    child.mkdir()
    (child / "__init__.py").write_text("import ibparent\n" if child_imports_parent else "")
    ext = child / f"_ext{sysconfig.get_config_var('EXT_SUFFIX')}"
    _gcc(ext, "int ibparent(void); int ibchild(void){return ibparent() + 1;}\n", f"-L{lib}", "-libparent")
    _dist(site, "ibchild", ["ibchild/__init__.py", f"ibchild/{ext.name}"],
          requires=() if child_imports_parent else ("ibparent>=1",))
    return ext


def _ldd(python: Path) -> dict:
    out = subprocess.run([str(python), str(P.zipapp_path()), "--sections", "ldd"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return next(c for c in json.loads(out.stdout)["checks"] if c["name"] == "ldd.resolve")


@pytest.mark.parametrize("child_imports_parent", [True, False], ids=["package-imports-parent", "requires-dist"])
def test_extension_that_loads_only_after_its_parent_passes(tmp_path, child_imports_parent):
    python, site = _venv(tmp_path)
    ext = _parent_and_child(site, tmp_path, child_imports_parent)
    alone = subprocess.run(["ldd", str(ext)], capture_output=True, text=True).stdout
    assert "libibparent.so => not found" in alone  # what a bare ldd says: the case the real load settles
    c = _ldd(python)
    assert c["status"] == "passed", c["reason"]
    rescued = {(r["library"], r["soname"]): r["via"] for r in c["figures"]["rescued"]}
    # its own package imports the parent, or its distribution requires it (imported first, as torch for torchaudio)
    want = "loads after import ibchild" if child_imports_parent else "loads after import ibparent, ibchild"
    assert rescued[(f"ibchild/{ext.name}", "libibparent.so")] == want


def test_extension_whose_dependency_is_gone_fails(tmp_path):
    python, site = _venv(tmp_path)
    pkg = site / "ibgone"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    dep = tmp_path / "libibgone.so"
    _gcc(dep, "int ibgone(void){return 1;}\n", "-Wl,-soname,libibgone.so")
    ext = pkg / f"_ext{sysconfig.get_config_var('EXT_SUFFIX')}"
    _gcc(ext, "int ibgone(void); int f(void){return ibgone();}\n", f"-L{tmp_path}", "-libgone")
    dep.unlink()
    c = _ldd(python)
    assert c["status"] == "failed"
    assert f"ibgone/{ext.name}: libibgone.so not found" in c["reason"], c["reason"]
    assert "load after import ibgone: libibgone.so: cannot open shared object file" in c["reason"], c["reason"]


def test_a_parent_that_does_not_preload_does_not_rescue(tmp_path):
    """The child imports a parent that does not bring the library in: the load fails as the loader says."""
    _, site = _venv(tmp_path)
    ext = _parent_and_child(site, tmp_path, child_imports_parent=True)
    (site / "ibparent" / "__init__.py").write_text("")  # no preload any more
    problems = [{"library": str(ext), "missing": ["libibparent.so"], "version_errors": []}]
    still, rescued = loading.confirm_by_loading(problems, [str(site)], {}, dists={})
    assert rescued == [] and still[0]["imported"] == ["ibchild"]
    assert "libibparent.so: cannot open shared object file" in still[0]["load_error"]


def test_only_the_drivers_libraries_may_be_missing(tmp_path):
    """Loaded as far as the loader goes, failing only on libcuda.so.1: allowed without a GPU, not otherwise."""
    _, site = _venv(tmp_path)
    fake = tmp_path / "drv"
    fake.mkdir()
    _gcc(fake / "libcuda.so.1", "int cuInit(int f){return f;}\n", "-Wl,-soname,libcuda.so.1")
    pkg = site / "ibgpu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    ext = pkg / "libibgpu.so"
    _gcc(ext, "int cuInit(int); int g(void){return cuInit(0);}\n", str(fake / "libcuda.so.1"))
    problems = [{"library": str(ext), "missing": ["libcuda.so.1"], "version_errors": []}]
    still, rescued = loading.confirm_by_loading(problems, [str(site)], {}, allowed_missing=P.linking.DRIVER_LIBS,
                                                dists={})
    assert still == [] and rescued[0]["via"] == "mapped after import ibgpu"
    still, _ = loading.confirm_by_loading(problems, [str(site)], {}, allowed_missing=(), dists={})
    assert still and "libcuda.so.1" in still[0]["load_error"]


def test_top_level_and_requirements_from_metadata(tmp_path):
    from importlib import metadata

    _dist(tmp_path, "tv-like", ["tvlike/__init__.py", "tvlike.libs/libcudart.41118559.so.12", "tv_mod.py",
                                "../../bin/x"], requires=("torch==2.9.1", "pillow; extra == 'img'"))
    dist = next(iter(metadata.distributions(path=[str(tmp_path)])))
    assert loading.top_level(dist) == ["tv_mod", "tvlike"]
    assert loading.requirement_names(dist) == ["torch"]
    assert os.path.basename(str(dist.locate_file("tv_mod.py"))) == "tv_mod.py"


def _cuda13_style(site: Path, tmp_path: Path, consumer_requires_kit: bool) -> None:
    """NVIDIA's CUDA 13 layout in miniature: one wheel's lib directory, no RUNPATH; a meta-package (cuda-toolkit)
    requires it; the consumer (torch) requires the meta-package and preloads the base library RTLD_GLOBAL. A
    multi-GPU solver (libcusolverMg) NEEDs the base; an RDMA plugin (libcufile_rdma) NEEDs it and libibverbs.so.1,
    which only a cluster's fabric stack provides."""
    lib = site / "ibnv" / "lib"
    lib.mkdir(parents=True)
    (site / "ibnv" / "__init__.py").write_text("")
    _gcc(lib / "libibnvbase.so.1", "int nvbase(void){return 7;}\n", "-Wl,-soname,libibnvbase.so.1")
    (lib / "libibnvbase.so").symlink_to("libibnvbase.so.1")
    _gcc(lib / "libibnvmg.so.1", "int nvbase(void); int mg(void){return nvbase();}\n", f"-L{lib}", "-libnvbase",
         "-Wl,-soname,libibnvmg.so.1")
    verbs = tmp_path / "libibverbs.so.1"
    _gcc(verbs, "int ibv(void){return 1;}\n", "-Wl,-soname,libibverbs.so.1")
    _gcc(lib / "libibnvrdma.so.1", "int nvbase(void); int ibv(void); int r(void){return nvbase() + ibv();}\n",
         f"-L{lib}", "-libnvbase", str(verbs), "-Wl,-soname,libibnvrdma.so.1")
    verbs.unlink()
    (lib / "libibnvbase.so").unlink()
    _dist(site, "ibnv", ["ibnv/__init__.py"] + [f"ibnv/lib/{n}" for n in
                                                ("libibnvbase.so.1", "libibnvmg.so.1", "libibnvrdma.so.1")])
    _dist(site, "ibkit", [], requires=("ibnv>=1; extra == 'nv'",))  # as cuda-toolkit: each wheel an extra
    (site / "ibtorch").mkdir()
    (site / "ibtorch" / "__init__.py").write_text(
        "import ctypes, os, ibnv\n"
        "ctypes.CDLL(os.path.join(os.path.dirname(ibnv.__file__), 'lib', 'libibnvbase.so.1'), mode=ctypes.RTLD_GLOBAL)\n")
    _dist(site, "ibtorch", ["ibtorch/__init__.py"], requires=("ibkit[nv]==1.0",) if consumer_requires_kit else ())


def test_a_library_loaded_by_what_requires_its_package_passes(tmp_path):
    """CUDA 13's shared lib directory: libcusolverMg resolves once torch (which requires cuda-toolkit, which requires
    the wheel) has loaded libcublas; libcufile_rdma then lacks only libibverbs, a cluster's fabric stack."""
    python, site = _venv(tmp_path)
    _cuda13_style(site, tmp_path, consumer_requires_kit=True)
    c = _ldd(python)
    assert c["status"] == "passed", c["reason"]
    rescued = {(r["library"], r["soname"]): r["via"] for r in c["figures"]["rescued"]}
    assert rescued[("ibnv/lib/libibnvmg.so.1", "libibnvbase.so.1")] == "loads after import ibnv, ibtorch"
    assert c["figures"]["plugins_needing_cluster_stack"] == {"ibnv/lib/libibnvrdma.so.1": ["libibverbs.so.1"]}


def test_a_library_nothing_loads_still_fails(tmp_path):
    """The same libraries when no installed package requires theirs: nothing brings the base in, both fail."""
    python, site = _venv(tmp_path)
    _cuda13_style(site, tmp_path, consumer_requires_kit=False)
    c = _ldd(python)
    assert c["status"] == "failed"
    assert "ibnv/lib/libibnvmg.so.1: libibnvbase.so.1 not found" in c["reason"], c["reason"]
    assert "ibnv/lib/libibnvrdma.so.1" in c["reason"], c["reason"]


def test_the_second_pass_allows_only_the_drivers_libraries_too(tmp_path):
    """A library of a CUDA 13-style shared lib directory that also NEEDs the driver's libcuda.so.1: only the second
    pass (after importing what requires its package) maps its base; what is left is libcuda.so.1, allowed without a
    GPU (the NVIDIA container toolkit mounts it) and not otherwise: the first pass's rule, in the second pass."""
    _, site = _venv(tmp_path)
    _cuda13_style(site, tmp_path, consumer_requires_kit=True)
    lib = site / "ibnv" / "lib"
    fake = tmp_path / "drv"
    fake.mkdir()
    _gcc(fake / "libcuda.so.1", "int cuInit(int f){return f;}\n", "-Wl,-soname,libcuda.so.1")
    (lib / "libibnvbase.so").symlink_to("libibnvbase.so.1")
    drv = lib / "libibnvdrv.so.1"
    _gcc(drv, "int nvbase(void); int cuInit(int); int d(void){return nvbase() + cuInit(0);}\n", f"-L{lib}",
         "-libnvbase", str(fake / "libcuda.so.1"), "-Wl,-soname,libibnvdrv.so.1")
    (lib / "libibnvbase.so").unlink()
    from importlib import metadata

    dists = {d.metadata["Name"]: d for d in metadata.distributions(path=[str(site)])}
    owners = {str(drv): "ibnv"}
    problems = [{"library": str(drv), "missing": ["libibnvbase.so.1", "libcuda.so.1"], "version_errors": []}]
    still, rescued = loading.confirm_by_loading(problems, [str(site)], owners,
                                                allowed_missing=P.linking.DRIVER_LIBS, dists=dists)
    assert still == [], still
    # the first pass already counted libcuda.so.1 as allowed: what the second rescues is the base
    assert [(r["soname"], r["via"]) for r in rescued] == [("libibnvbase.so.1", "mapped after import ibnv, ibtorch")]
    still, rescued = loading.confirm_by_loading(problems, [str(site)], owners, allowed_missing=(), dists=dists)
    assert rescued == [] and len(still) == 1
    assert still[0]["missing"] == ["libcuda.so.1"] and "libcuda.so.1" in still[0]["load_error"], still
