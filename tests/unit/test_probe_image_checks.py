"""The probe's image checks (pip check, ldd scan, hygiene, locale, arbitrary UID): parsers on captured text, and the
ldd rules against the real dynamic loader on libraries compiled here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import linking, sharedlibs, system, uid

PIP_OK = "No broken requirements found.\n"
PIP_BROKEN = """\
torch 2.13.0 requires sympy, which is not installed.
torch 2.13.0 requires filelock, which is not installed.
ibbroken 1.0 has requirement numpy<1, but you have numpy 2.3.4.
nvidia-cudnn-cu12 9.10.2.21 is not supported on this platform
something pip prints that nobody parsed yet
"""


def test_pip_check_ok_is_no_problem():
    assert P.parse_pip_check(PIP_OK) == []
    assert P.parse_pip_check("") == []


def test_pip_check_problems_by_kind():
    got = P.parse_pip_check(PIP_BROKEN)
    assert [g["kind"] for g in got] == ["missing", "missing", "conflict", "platform", "other"]
    assert got[0] == {"kind": "missing", "package": "torch", "version": "2.13.0", "requirement": "sympy"}
    assert got[2] == {"kind": "conflict", "package": "ibbroken", "version": "1.0", "requirement": "numpy<1",
                      "found": "numpy", "found_version": "2.3.4"}
    assert got[3]["package"] == "nvidia-cudnn-cu12"
    assert got[4] == {"kind": "other", "line": "something pip prints that nobody parsed yet"}


LDD_TORCH_CUDA = """\
\tlinux-vdso.so.1 (0x00007ffd2a5f3000)
\tlibc10_cuda.so => /opt/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so (0x00007f1c9e400000)
\tlibcublas.so.12 => /opt/venv/lib/python3.12/site-packages/torch/lib/../../nvidia/cublas/lib/libcublas.so.12 (0x00007f1c97e00000)
\tlibcuda.so.1 => not found
\tlibnvidia-ml.so.1 => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f1c97a00000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1c97600000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f1ca1e3d000)
"""

LDD_VERSION = """\
/opt/venv/lib/python3.11/site-packages/x/_x.so: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found \
(required by /opt/venv/lib/python3.11/site-packages/x/_x.so)
\tlinux-vdso.so.1 (0x00007ffc0b9e5000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f7c1b000000)
"""


def test_parse_ldd_resolved_missing_interpreter():
    got = P.parse_ldd(LDD_TORCH_CUDA)
    assert got["missing"] == ["libcuda.so.1", "libnvidia-ml.so.1"]
    assert got["resolved"]["libcublas.so.12"].endswith("/nvidia/cublas/lib/libcublas.so.12")
    assert got["resolved"]["ld-linux-x86-64.so.2"] == "/lib64/ld-linux-x86-64.so.2"
    assert "linux-vdso.so.1" not in got["resolved"]
    assert got["dynamic"] and got["version_errors"] == []


def test_parse_ldd_version_error_and_static():
    got = P.parse_ldd(LDD_VERSION)
    assert got["version_errors"] == [{"library": "/lib/x86_64-linux-gnu/libc.so.6", "version": "GLIBC_2.38",
                                      "required_by": "/opt/venv/lib/python3.11/site-packages/x/_x.so"}]
    assert not P.parse_ldd("\tstatically linked\n")["dynamic"]
    assert not P.parse_ldd("\tnot a dynamic executable\n")["dynamic"]


def _res(resolved=None, missing=(), version_errors=()):
    return {"resolved": dict(resolved or {}), "missing": list(missing), "version_errors": list(version_errors),
            "dynamic": True}


def test_evaluate_driver_libs_allowed_only_when_asked():
    results = {"/sp/torch/lib/libtorch_cuda.so": _res(missing=["libcuda.so.1", "libnvidia-ml.so.1"])}
    assert P.evaluate_ldd(results, allowed_missing=linking.DRIVER_LIBS) == ([], [])
    problems, _ = P.evaluate_ldd(results)
    assert problems[0]["missing"] == ["libcuda.so.1", "libnvidia-ml.so.1"]


def test_evaluate_parent_resolves_child_dependency():
    """libcusolver alone misses libcublas (its RUNPATH is only $ORIGIN); loaded under libtorch_cuda (RPATH into
    nvidia/cublas/lib) it resolves: ldd of the parent shows both."""
    solver = "/sp/nvidia/cusolver/lib/libcusolver.so.11"
    cublas = "/sp/nvidia/cublas/lib/libcublas.so.12"
    results = {
        solver: _res(missing=["libcublas.so.12"]),
        "/sp/torch/lib/libtorch_cuda.so": _res({"libcusolver.so.11": solver, "libcublas.so.12": cublas}),
    }
    problems, rescued = P.evaluate_ldd(results)
    assert problems == []
    assert rescued == [{"library": solver, "soname": "libcublas.so.12", "via": "/sp/torch/lib/libtorch_cuda.so"}]


def test_evaluate_parent_that_also_misses_it_does_not_count():
    child = "/sp/a/libchild.so"
    results = {child: _res(missing=["libgone.so.1"]),
               "/sp/a/libparent.so": _res({"libchild.so": child}, missing=["libgone.so.1"])}
    problems, rescued = P.evaluate_ldd(results)
    assert rescued == []
    assert {p["library"] for p in problems} == {child, "/sp/a/libparent.so"}


def test_evaluate_torch_preload_and_version_errors():
    lib = "/sp/other/libuses_nvjitlink.so"
    results = {lib: _res(missing=["libnvJitLink.so.12"]),
               "/sp/x/_x.so": _res(version_errors=[{"library": "libc.so.6", "version": "GLIBC_2.38",
                                                    "required_by": "/sp/x/_x.so"}])}
    problems, rescued = P.evaluate_ldd(results, preloaded={"libnvJitLink.so.12": linking.PRELOAD_LIB})
    assert rescued[0]["via"].startswith("torch preload")
    assert [p["library"] for p in problems] == ["/sp/x/_x.so"]


@pytest.mark.parametrize("name,ext", [("_C.cpython-311-x86_64-linux-gnu.so", True), ("_rust.abi3.so", True),
                                      ("foo.so", True), ("libfoo.so", False), ("libcufile_rdma.so.1", False),
                                      ("nvshmem_bootstrap_mpi.so.3", False)])
def test_is_extension(name, ext):
    assert linking.is_extension(name) is ext


def _dyn(needed=(), soname=None):
    return {"needed": list(needed), "soname": soname, "rpath": None, "runpath": None}


def test_fabric_deps_of_dlopen_plugins_are_reported_not_failed():
    """nvidia-nvshmem's MPI bootstrap and nvidia-cufile's RDMA plugin (both pulled in by torch's CUDA wheels) need
    the cluster's MPI / verbs only when chosen; the same libraries missing elsewhere still fail."""
    sp = "/sp/nvidia"
    dyn = {f"{sp}/nvshmem/lib/nvshmem_bootstrap_mpi.so.3": _dyn(["libmpi.so.40", "libc.so.6"]),
           f"{sp}/nvshmem/lib/libnvshmem_host.so.3": _dyn(["libc.so.6"], "libnvshmem_host.so.3"),
           f"{sp}/cufile/lib/libcufile_rdma.so.1": _dyn(["libibverbs.so.1"], "libcufile_rdma.so.1"),
           f"{sp}/cufile/lib/libcufile.so.0": _dyn(["libc.so.6"], "libcufile.so.0"),
           "/sp/mpi4py/MPI.cpython-311-x86_64-linux-gnu.so": _dyn(["libmpi.so.40"]),
           "/sp/torch/lib/libtorch_cuda.so": _dyn(["libnvshmem_host.so.3", "libgone.so.1"], "libtorch_cuda.so"),
           "/sp/torch/_C.cpython-311-x86_64-linux-gnu.so": _dyn(["libtorch_cuda.so"])}
    plugins = linking.plugins(dyn)
    assert plugins == {f"{sp}/nvshmem/lib/nvshmem_bootstrap_mpi.so.3", f"{sp}/cufile/lib/libcufile_rdma.so.1",
                       f"{sp}/cufile/lib/libcufile.so.0"}
    problems = [{"library": lib, "missing": miss, "version_errors": []} for lib, miss in (
        (f"{sp}/nvshmem/lib/nvshmem_bootstrap_mpi.so.3", ["libmpi.so.40"]),
        (f"{sp}/cufile/lib/libcufile_rdma.so.1", ["libibverbs.so.1"]),
        ("/sp/mpi4py/MPI.cpython-311-x86_64-linux-gnu.so", ["libmpi.so.40"]),  # imported by Python: a failure
        ("/sp/torch/lib/libtorch_cuda.so", ["libgone.so.1"]))]
    keep, optional = linking.split_optional(problems, plugins)
    assert [x["library"] for x in optional] == [f"{sp}/nvshmem/lib/nvshmem_bootstrap_mpi.so.3",
                                                f"{sp}/cufile/lib/libcufile_rdma.so.1"]
    assert [x["library"] for x in keep] == ["/sp/mpi4py/MPI.cpython-311-x86_64-linux-gnu.so",
                                            "/sp/torch/lib/libtorch_cuda.so"]
    plugin_missing_other = [{"library": f"{sp}/cufile/lib/libcufile.so.0", "missing": ["libstdc++.so.6"],
                             "version_errors": []}]
    assert linking.split_optional(plugin_missing_other, plugins) == (plugin_missing_other, [])


def test_where_found(tmp_path):
    sp = str(tmp_path)
    for pkg in ("torch", "numpy"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").touch()
    (tmp_path / "nvidia").mkdir()  # a namespace package: each nvidia/<name> is its own wheel
    roots = [sp]
    assert P.where_found(f"{sp}/torch/lib/libtorch.so", "/lib/x86_64-linux-gnu/libc.so.6", roots) == "system"
    assert P.where_found(f"{sp}/torch/_C.so", f"{sp}/torch/lib/libtorch.so", roots) == "own package"
    assert P.where_found(f"{sp}/numpy/core/_m.so", f"{sp}/numpy.libs/libopenblas.so", roots) == "own package"
    assert P.where_found(f"{sp}/torch/lib/libtorch_cuda.so", f"{sp}/nvidia/cublas/lib/libcublas.so.12",
                         roots) == "nvidia/cublas/lib"
    assert P.where_found(f"{sp}/nvidia/cusparse/lib/libcusparse.so.12", f"{sp}/nvidia/nvjitlink/lib/libnvJitLink.so.12",
                         roots) == "nvidia/nvjitlink/lib"
    assert P.where_found(f"{sp}/nvidia/cudnn/lib/libcudnn_ops.so.9", f"{sp}/nvidia/cudnn/lib/libcudnn_graph.so.9",
                         roots) == "own package"
    # the real nvidia wheels all ship nvidia/__init__.py: the RECORD owners decide
    (tmp_path / "nvidia" / "__init__.py").touch()
    owners = {f"{sp}/nvidia/cusparse/lib/libcusparse.so.12": "nvidia-cusparse-cu12",
              f"{sp}/nvidia/nvjitlink/lib/libnvJitLink.so.12": "nvidia-nvjitlink-cu12"}
    assert P.where_found(f"{sp}/nvidia/cusparse/lib/libcusparse.so.12", f"{sp}/nvidia/nvjitlink/lib/libnvJitLink.so.12",
                         roots, owners) == "nvidia/nvjitlink/lib"


# ---- the real loader: what evaluate() assumes about RPATH inheritance, checked with ldd on compiled libraries ----

def _cc(*args):
    # --no-as-needed: keep DT_NEEDED although nothing uses a symbol of the library (some toolchains default to as-needed)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--no-as-needed", *args], check=True, capture_output=True)


@pytest.fixture
def libs(tmp_path):
    if not shutil.which("gcc") or not shutil.which("ldd"):
        pytest.skip("gcc and ldd needed")
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "src.c").write_text("int f(void){return 1;}\n")
    _cc("-o", str(tmp_path / "b" / "libibb.so"), str(tmp_path / "src.c"))
    # libiba needs libibb but has no search path for it (like a wheel library relying on its loader)
    _cc("-o", str(tmp_path / "a" / "libiba.so"), str(tmp_path / "src.c"), f"-L{tmp_path / 'b'}", "-libb")
    return tmp_path


@pytest.mark.parametrize("dtags,inherited", [("--disable-new-dtags", True), ("--enable-new-dtags", False)])
def test_parent_rpath_reaches_child_only_as_dt_rpath(libs, dtags, inherited):
    """DT_RPATH of the parent applies to its whole chain (torch's wheels use it); DT_RUNPATH only to its own
    direct dependencies. The probe takes the loader's word (ldd of the parent) either way."""
    parent = libs / "libibp.so"
    _cc("-o", str(parent), str(libs / "src.c"), f"-L{libs / 'a'}", "-liba",
        f"-Wl,{dtags},-rpath,{libs / 'a'}:{libs / 'b'}")
    cmd = sharedlibs.ldd_command()
    results = {str(lib): sharedlibs._ldd(cmd, str(lib)) for lib in (libs / "a" / "libiba.so", parent)}
    assert results[str(libs / "a" / "libiba.so")]["missing"] == ["libibb.so"]
    problems, rescued = P.evaluate_ldd(results)
    if inherited:
        assert problems == [] and rescued[0]["via"] == str(parent)
    else:
        assert {p["library"] for p in problems} == {str(libs / "a" / "libiba.so"), str(parent)}


@pytest.mark.parametrize("dtags,field", [("--disable-new-dtags", "rpath"), ("--enable-new-dtags", "runpath")])
def test_elf_dynamic_reads_needed_and_search_path(libs, dtags, field):
    """What `readelf -d` shows, read by the probe itself (stdlib struct, seeks only)."""
    lib = libs / f"libib{field}.so"
    _cc("-o", str(lib), str(libs / "src.c"), f"-L{libs / 'b'}", "-libb", f"-Wl,{dtags},-rpath,$ORIGIN/../../b/lib")
    dyn = sharedlibs.elf_dynamic(str(lib))
    assert "libibb.so" in dyn["needed"]
    assert dyn[field] == "$ORIGIN/../../b/lib"
    assert dyn["rpath" if field == "runpath" else "runpath"] is None
    assert sharedlibs.search_path_note(dyn) == f"{field.upper()} $ORIGIN/../../b/lib"
    assert sharedlibs.elf_dynamic(str(libs / "src.c")) is None
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
        assert f"({field.upper()})" in out and "[$ORIGIN/../../b/lib]" in out


def test_ldd_section_on_a_site_packages_tree(libs, monkeypatch):
    """The section end to end over a fake site-packages: one library misses a dependency that lies elsewhere."""
    site = libs / "site-packages"
    (site / "pkg").mkdir(parents=True)
    shutil.copy(libs / "a" / "libiba.so", site / "pkg" / "libiba.so")
    (site / "other").mkdir()
    shutil.copy(libs / "b" / "libibb.so", site / "other" / "libibb.so")
    monkeypatch.setattr(sharedlibs, "site_roots", lambda: [str(site)])
    p = P.Probe(["ldd"])
    sharedlibs.run(p)
    checks = {c["name"]: c for c in p.doc["checks"]}
    c = checks["ldd.resolve"]
    assert c["status"] == "failed"
    assert "pkg/libiba.so: libibb.so not found (present at other/libibb.so" in c["reason"]
    assert "[no RPATH/RUNPATH; needed directly]" in c["reason"]
    assert c["figures"]["libraries"] == 2
    assert checks["ldd.machine"]["status"] == "passed"  # both built here, for this machine


def _other_machine(src: Path, dest: Path) -> str:
    """A copy of a library built here with the ELF header's machine set to another one (aarch64 on x86_64, x86_64
    elsewhere): what a wheel of the other platform puts into site-packages. Returns that machine's name."""
    data = bytearray(src.read_bytes())
    here = int.from_bytes(data[18:20], "little")
    other = 183 if here != 183 else 62
    data[18:20] = other.to_bytes(2, "little")
    dest.write_bytes(bytes(data))
    return sharedlibs.machine_name((2, 1, 3, other))


def test_ldd_machine_passes_a_tree_built_here_and_fails_a_library_of_another_machine(libs, monkeypatch):
    """ldd.machine on both sides: a site-packages of libraries built here passes; one library of another machine (an
    aarch64 wheel's .so in an amd64 image) fails, named with its machine, and stays out of the ldd scan."""
    site = libs / "site-packages"
    (site / "pkg").mkdir(parents=True)
    shutil.copy(libs / "b" / "libibb.so", site / "pkg" / "libibb.so")
    monkeypatch.setattr(sharedlibs, "site_roots", lambda: [str(site)])
    mine = sharedlibs.machine_name(sharedlibs.elf_header(os.path.realpath(sys.executable)))

    def checks():
        p = P.Probe(["ldd"])
        sharedlibs.run(p)
        return {c["name"]: c for c in p.doc["checks"]}

    good = checks()
    assert good["ldd.machine"]["status"] == "passed", good["ldd.machine"]
    assert good["ldd.machine"]["reason"] == f"1 shared libraries under site-packages, all built for {mine}"
    (site / "wrongarch").mkdir()
    other = _other_machine(libs / "b" / "libibb.so", site / "wrongarch" / "_C.so")
    bad = checks()
    assert bad["ldd.machine"]["status"] == "failed"
    assert bad["ldd.machine"]["reason"] == (f"1 shared libraries under site-packages are built for another machine "
                                            f"than {mine}: wrongarch/_C.so ({other})")
    assert bad["ldd.resolve"]["status"] == "passed" and bad["ldd.resolve"]["figures"]["libraries"] == 1
    assert bad["ldd.resolve"]["figures"]["foreign_arch"] == ["wrongarch/_C.so"]


def test_machine_names():
    assert sharedlibs.machine_name((2, 1, 3, 183)) == "aarch64"
    assert sharedlibs.machine_name((2, 1, 3, 62)) == "x86_64"
    assert sharedlibs.machine_name((1, 1, 3, 62)) == "x86_64 (32-bit)"
    assert sharedlibs.machine_name((1, 1, 3, 3)) == "i386"
    assert sharedlibs.machine_name((2, 1, 3, 9999)) == "e_machine 9999"


# ---- hygiene ----------------------------------------------------------------------------------------------------

def _image(tmp_path, files=(), dirs=()):
    root = tmp_path / "root"
    for d in ("etc/ssh", "tmp", "var/tmp", "root", "home/ml", "var/lib/apt/lists/partial",
              "var/cache/apt/archives/partial", *dirs):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\nml:x:1000:1000::/home/ml:/bin/bash\n"
                                     "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n")
    (root / "var/lib/apt/lists/lock").write_text("")
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("x")
    return str(root)


def test_hygiene_clean_image_has_no_findings(tmp_path):
    root = _image(tmp_path, dirs=("tmp/.X11-unix", "tmp/ibprobe-1/probe.pyz"))
    got = P.hygiene_findings(root, own="/tmp/ibprobe-1")
    assert got == {"ssh_host_keys": ([], []), "tmp": ([], []), "pip_cache": ([], []), "apt_cache": ([], [])}


@pytest.mark.parametrize("check, files, found", [
    ("ssh_host_keys", ["etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_rsa_key.pub"],
     ["/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key.pub"]),
    ("tmp", ["tmp/x", "var/tmp/y", "tmp/.X11-unix/X0"], ["/tmp/.X11-unix", "/tmp/x", "/var/tmp/y"]),
    ("pip_cache", ["home/ml/.cache/pip/http/a", "root/.cache/uv/b"], ["/home/ml/.cache/pip", "/root/.cache/uv"]),
    ("apt_cache", ["var/cache/apt/archives/a.deb", "var/lib/apt/lists/deb.debian.org_InRelease",
                   "var/cache/apt/pkgcache.bin"],
     ["/var/cache/apt/archives/a.deb", "/var/cache/apt/pkgcache.bin", "/var/lib/apt/lists/deb.debian.org_InRelease"]),
])
def test_hygiene_finds_what_a_derived_layer_adds(tmp_path, check, files, found):
    """Judged by what the image contains, never by when it appeared: a file made a second ago counts too."""
    got = P.hygiene_findings(_image(tmp_path, files), own="/tmp/ibprobe-1")
    assert got[check] == (found, [])
    assert all(v == ([], []) for k, v in got.items() if k != check)


def test_hygiene_section_runs_here():
    """On this host (not a container): whatever it finds, every check is reported with a known status."""
    p = P.Probe(["hygiene"])
    from imagebuild.smoke.probe import hygiene

    hygiene.run(p)
    names = {c["name"]: c["status"] for c in p.doc["checks"]}
    assert set(names) == {"hygiene.ssh_host_keys", "hygiene.tmp", "hygiene.pip_cache", "hygiene.apt_cache"}
    assert set(names.values()) <= {"passed", "failed", "skipped"}
    assert p.doc["hygiene"]["uid"] == os.getuid()


# ---- locale -----------------------------------------------------------------------------------------------------

def test_parse_environ_and_effective_ctype():
    env = P.parse_environ(b"PATH=/usr/bin\0LANG=C\0LC_ALL=\0EMPTY\0X=a=b\0")
    assert env == {"PATH": "/usr/bin", "LANG": "C", "LC_ALL": "", "X": "a=b"}
    assert P.effective_ctype(env) == ("LANG", "C")  # an empty LC_ALL does not count
    assert P.effective_ctype({"LANG": "C", "LC_CTYPE": "C.UTF-8"}) == ("LC_CTYPE", "C.UTF-8")
    assert P.effective_ctype({"LANG": "C", "LC_CTYPE": "C.UTF-8", "LC_ALL": "POSIX"}) == ("LC_ALL", "POSIX")
    assert P.effective_ctype({}) == (None, "")


@pytest.mark.parametrize("name,utf8", [("C.UTF-8", True), ("C.utf8", True), ("en_US.UTF-8", True),
                                       ("de_DE.utf-8@euro", True), ("C", False), ("POSIX", False),
                                       ("en_US", False), ("en_US.ISO-8859-1", False), ("", False)])
def test_is_utf8_name(name, utf8):
    assert P.is_utf8_name(name) is utf8


def _locale_checks(env: dict) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "LANG"}
    out = subprocess.run([sys.executable, str(P.zipapp_path()), "--sections", "locale"], capture_output=True,
                         text=True, env={**keep, **env}, timeout=60)
    return {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def test_locale_section_sees_the_environment_python_coerced():
    """LANG=C: python coerces LC_CTYPE (PEP 538) and its encodings are UTF-8, but the image's locale is not."""
    got = _locale_checks({"LANG": "C"})
    assert got["locale.utf8"]["status"] == "failed"
    assert "LANG=C is not a UTF-8 locale" in got["locale.utf8"]["reason"]
    assert got["locale.python"]["status"] == "passed"


def test_locale_section_missing_locale_and_good_one():
    got = _locale_checks({"LANG": "xx_YY.UTF-8"})
    assert got["locale.utf8"]["status"] == "failed"
    assert "xx_YY.UTF-8 does not exist in the image" in got["locale.utf8"]["reason"]
    got = _locale_checks({"LC_ALL": "C.UTF-8"})
    assert got["locale.utf8"]["status"] == "passed", got["locale.utf8"]["reason"]


# ---- uid --------------------------------------------------------------------------------------------------------

def test_writable_really_writes(tmp_path):
    assert uid.writable(str(tmp_path)) == (True, "")
    assert list(tmp_path.iterdir()) == []
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    # root writes into a 0555 directory; /sys (sysfs) refuses new files even to root
    ok, err = uid.writable("/sys" if os.getuid() == 0 else str(ro))
    assert not ok and "Permission denied" in err


def test_uid_section_reports_home_not_writable(tmp_path):
    ro = tmp_path / "home"
    ro.mkdir(mode=0o555)
    if os.getuid() == 0:  # root writes anywhere: a HOME that does not exist fails for root too
        ro = tmp_path / "missing-home"
    env = dict(os.environ, HOME=str(ro))
    out = subprocess.run([sys.executable, str(P.zipapp_path()), "--sections", "uid"], capture_output=True,
                         text=True, env=env, timeout=120)
    got = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert got["uid.home_writable"]["status"] == "failed"
    assert f"HOME {ro} not writable by uid {os.getuid()}" in got["uid.home_writable"]["reason"]
    assert got["uid.tmp_writable"]["status"] == "passed"
    assert got["uid.torch_import"]["status"] in ("skipped", "passed")


def test_uid_temp_dir_is_tmpdir_or_tmp_never_a_fallback(tmp_path):
    """tempfile.gettempdir() would pick /var/tmp or the working directory when TMPDIR is not writable."""
    missing = tmp_path / "no-such-tmp"
    env = dict(os.environ, TMPDIR=str(missing))
    out = subprocess.run([sys.executable, str(P.zipapp_path()), "--sections", "uid"], capture_output=True,
                         text=True, env=env, timeout=120, cwd=tmp_path)
    got = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert got["uid.tmp_writable"]["status"] == "failed"
    assert f"temp dir {missing} not writable by uid {os.getuid()}" in got["uid.tmp_writable"]["reason"]


def _torch_site(tmp_path, with_metadata: bool) -> Path:
    """A site folder where `torch` is only metadata (its package files unreadable to this user, as when a derived
    image chmods them away from group 0), or nothing at all."""
    site = tmp_path / "site"
    site.mkdir()
    if with_metadata:
        dist = site / "torch-9.9.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9\n")
    return site


@pytest.mark.parametrize("with_metadata", [True, False])
def test_uid_torch_import_fails_when_torch_is_installed_but_does_not_import(tmp_path, with_metadata):
    code = ("import sys; sys.path = sys.argv[1:3] + [d for d in sys.path if 'site-packages' not in d]\n"
            "sys.modules['torch'] = None\n"
            "from probe import uid\n"
            "class P:\n"
            "    doc, checks, torch_error = {}, {}, \"No module named 'torch'\"\n"
            "    def import_torch(self): return None\n"
            "    def check(self, name, status, reason='', **fig): self.checks[name] = (status, reason)\n"
            "p = P(); uid.run(p); print(p.checks['uid.torch_import'][0])\n")
    probe_dir = Path(P.__file__).parent.parent
    site = _torch_site(tmp_path, with_metadata)
    out = subprocess.run([sys.executable, "-I", "-c", code, str(site), str(probe_dir)], capture_output=True,
                         text=True, timeout=60, env={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("failed" if with_metadata else "skipped")


def test_new_sections_are_known_to_the_cli():
    for s in ("hygiene", "locale", "pip", "ldd", "uid"):
        assert s in P.SECTIONS and s in P.DEFAULT_SECTIONS
    assert Path(P.zipapp_path()).exists()


def _system_check(env: dict) -> dict:
    out = subprocess.run([sys.executable, str(P.zipapp_path()), "--sections", "system"], capture_output=True,
                         text=True, env=env, timeout=60)
    return next(c for c in json.loads(out.stdout)["checks"] if c["name"] == "system.ca_bundle")


def test_ca_bundle_named_in_env_must_exist(tmp_path):
    """system.ca_bundle: a CA-bundle variable naming a file the image lacks (a build host's path) fails, naming the
    variable; one naming a readable file, or none set, passes."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    base = {k: v for k, v in os.environ.items() if k not in system.CA_BUNDLE_ENV}
    assert system.ca_bundle_problems({"PIP_CERT": str(bundle), "SSL_CERT_FILE": ""}) == []
    assert system.ca_bundle_problems({"REQUESTS_CA_BUNDLE": "/build/host/ca.pem"}) == [
        "REQUESTS_CA_BUNDLE=/build/host/ca.pem (no such file)"]
    bad = _system_check(dict(base, PIP_CERT=str(tmp_path / "gone.pem")))
    assert bad["status"] == "failed" and f"PIP_CERT={tmp_path / 'gone.pem'} (no such file)" in bad["reason"]
    good = _system_check(dict(base, PIP_CERT=str(bundle)))
    assert good["status"] == "passed" and good["figures"] == {"PIP_CERT": str(bundle)}
    assert _system_check(base)["status"] == "passed"
