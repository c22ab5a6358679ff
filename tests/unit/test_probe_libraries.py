"""One copy of each CUDA library (probe/libraries.py) in a fake site-packages tree: every copy a wheel bundles counts,
auditwheel's hashed `<pkg>.libs/` names included, and each copy names the package that brought it (RECORD for
wheels, dpkg's file lists for system packages)."""

from __future__ import annotations

import os
from pathlib import Path

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import libraries
from imagebuild.smoke.probe.sharedlibs import dist_owners


def _file(path: Path, text: str = "\x7fELF") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _dist(site: Path, name: str, files: list[str]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    _file(site / "nvidia/cuda_runtime/lib/libcudart.so.12")
    _file(site / "nvidia/cudnn/lib/libcudnn.so.9")
    _file(site / "torchvision.libs/libcudart.41118559.so.12")
    _file(site / "torchvision.libs/libjpeg.1c1c4b09.so.8")  # vendored, not a CUDA library
    os.symlink("libcudnn.so.9", site / "nvidia/cudnn/lib/libcudnn.so")  # dev symlink: not a second copy
    _dist(site, "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/lib/libcudart.so.12"])
    _dist(site, "nvidia-cudnn-cu12", ["nvidia/cudnn/lib/libcudnn.so.9"])
    _dist(site, "torchvision", ["torchvision.libs/libcudart.41118559.so.12", "torchvision.libs/libjpeg.1c1c4b09.so.8"])
    return site


def test_auditwheel_copy_counts_and_names_its_package(tmp_path):
    site = _site(tmp_path)
    copies = libraries.group_library_copies(libraries.walk_libraries([str(site)]))
    assert sorted(copies) == ["libcudart.so.12", "libcudnn.so.9"]
    assert len(copies["libcudart.so.12"]) == 2 and len(copies["libcudnn.so.9"]) == 1
    owners = libraries.owners_of(copies, dist_owners([str(site)]), info_dir=str(tmp_path / "no-dpkg"))
    text = P.describe_copies("libcudart.so.12", copies["libcudart.so.12"], owners)
    assert text.startswith("libcudart.so.12: 2 copies (")
    assert f"{site.resolve()}/nvidia/cuda_runtime/lib/libcudart.so.12 from nvidia-cuda-runtime-cu12" in text
    assert f"{site.resolve()}/torchvision.libs/libcudart.41118559.so.12 from torchvision" in text
    assert P.library_family("libcudart.so.12") == "cudart"


def test_system_copy_is_named_by_its_debian_package(tmp_path):
    site = _site(tmp_path)
    system = _file(tmp_path / "usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0")
    os.symlink("libcudnn.so.9.1.0", system.parent / "libcudnn.so.9")
    info = tmp_path / "dpkg-info"
    _file(info / "libcudnn9-cuda-12.list", f"/.\n{system.parent}\n{system}\n{system.parent / 'libcudnn.so.9'}\n")
    _file(info / "zlib1g:amd64.list", "/usr/lib/x86_64-linux-gnu/libz.so.1\n")
    copies = libraries.group_library_copies(libraries.walk_libraries([str(site), str(tmp_path / "usr")]))
    assert len(copies["libcudnn.so.9"]) == 2  # system + pip: the duplicate the check must catch
    owners = libraries.owners_of(copies, dist_owners([str(site)]), info_dir=str(info))
    assert owners[str(system.resolve())] == "deb libcudnn9-cuda-12"
    assert owners[str((site / "nvidia/cudnn/lib/libcudnn.so.9").resolve())] == "nvidia-cudnn-cu12"


def test_a_copy_nobody_lists_is_unowned(tmp_path):
    stray = _file(tmp_path / "opt/x/libnccl.so.2")
    copies = libraries.group_library_copies(libraries.walk_libraries([str(tmp_path / "opt")]))
    assert libraries.owners_of(copies, {}, info_dir=str(tmp_path)) == {str(stray.resolve()): "unowned"}


# --- a bare host (scripts/gpu-probe.sh --host): which copy torch loads, and whether another can load beside it ------

def _shared_object(path: Path, soname: str) -> str:
    """A real ELF shared object at `path` whose DT_SONAME is `soname` (gcc)."""
    import shutil
    import subprocess

    if not shutil.which("gcc"):
        import pytest

        pytest.skip("gcc is not installed (scripts/system-deps.sh installs build-essential)")
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / "empty.c"
    src.write_text("int ib_probe_test_symbol(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(path), str(src)], check=True)
    return str(path.resolve())


def _host_probe(monkeypatch, loaded: list[str]):
    from imagebuild.smoke.probe.common import Probe

    p = Probe(["libraries"], host=True)
    p.torch = object()  # torch "imported": what it mapped is what read_maps says
    monkeypatch.setattr(libraries, "read_maps", lambda: "".join(
        f"7f0000000000-7f0000001000 r-xp 00000000 08:01 42 {x}\n" for x in loaded))
    return p


def _host_check(p, copies: dict, ldconfig: list[str] = ()) -> dict:
    owners = {x: "deb libcudart12" if "/system/" in x else "a wheel" for v in copies.values() for x in v}
    libraries._on_a_host(p, copies, copies, owners, list(ldconfig))
    return next(c for c in p.doc["checks"] if c["name"] == "libraries.one_copy")


def test_host_second_copy_off_the_search_path_passes_naming_the_loaded_one(tmp_path, monkeypatch):
    wheel = _shared_object(tmp_path / "site/nvidia/cuda_runtime/lib/libcudart.so.12", "libcudart.so.12")
    system = _shared_object(tmp_path / "system/lib/libcudart.so.12", "libcudart.so.12")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    p = _host_probe(monkeypatch, [wheel])
    c = _host_check(p, {"libcudart.so.12": sorted([wheel, system])}, ldconfig=[system])
    assert c["status"] == "passed", c
    assert f"{wheel} (a wheel) loaded by torch" in c["reason"]
    assert f"{system} (deb libcudart12) not loaded by torch: in the loader cache" in c["reason"]


def test_host_copy_on_ld_library_path_is_named_as_able_to_shadow(tmp_path, monkeypatch):
    wheel = _shared_object(tmp_path / "site/nvidia/cuda_runtime/lib/libcudart.so.12", "libcudart.so.12")
    system = _shared_object(tmp_path / "system/lib/libcudart.so.12", "libcudart.so.12")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent:{tmp_path / 'system/lib'}")
    c = _host_check(_host_probe(monkeypatch, [wheel]), {"libcudart.so.12": sorted([wheel, system])})
    assert c["status"] == "passed", c  # one SONAME: the loader maps one of the two, never both
    assert f"{system} (deb libcudart12) can shadow torch's copy: its folder is on LD_LIBRARY_PATH" in c["reason"]


def test_host_vendored_copy_with_its_own_soname_fails(tmp_path, monkeypatch):
    wheel = _shared_object(tmp_path / "site/nvidia/cuda_runtime/lib/libcudart.so.12", "libcudart.so.12")
    vendored = _shared_object(tmp_path / "site/torchvision.libs/libcudart.41118559.so.12",
                              "libcudart.41118559.so.12")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    c = _host_check(_host_probe(monkeypatch, [wheel]), {"libcudart.so.12": sorted([wheel, vendored])})
    assert c["status"] == "failed", c
    assert (f"{vendored} (a wheel) loads beside torch's copy: SONAME libcudart.41118559.so.12 differs from the "
            "loaded copy's libcudart.so.12") in c["reason"]


def test_host_two_copies_mapped_in_one_process_fail(tmp_path, monkeypatch):
    wheel = _shared_object(tmp_path / "site/nvidia/cuda_runtime/lib/libcudart.so.12", "libcudart.so.12")
    system = _shared_object(tmp_path / "system/lib/libcudart.so.12", "libcudart.so.12")
    c = _host_check(_host_probe(monkeypatch, [wheel, system]), {"libcudart.so.12": sorted([wheel, system])})
    assert c["status"] == "failed" and c["reason"].count("loaded by torch") == 2, c


def test_in_an_image_a_second_copy_fails_as_before(tmp_path, monkeypatch):
    """Without --host the rule stays strict: any second copy fails, whatever loads."""
    site = _site(tmp_path)
    monkeypatch.setattr(libraries.sys, "path", [str(site)])
    monkeypatch.setattr(libraries, "ldconfig_libraries", lambda: [])
    import site as site_module

    monkeypatch.setattr(site_module, "getsitepackages", lambda: [str(site)])
    from imagebuild.smoke.probe.common import Probe

    p = Probe(["libraries"])
    libraries.run(p)
    c = next(c for c in p.doc["checks"] if c["name"] == "libraries.one_copy")
    assert c["status"] == "failed" and "libcudart.so.12: 2 copies" in c["reason"]
    assert p.doc["probe"]["context"] == "image" and "host_copies" not in p.doc["libraries"]
