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
