"""The inventory's file parsers on recorded files (tests/unit/fixtures/inventory/README says where each is from):
dpkg status and status.d, DEP-5 copyright, dist-info METADATA / egg-info PKG-INFO, os-release, and the tar filter
that applies layer whiteouts."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from imagebuild.inventory import dpkg, pydist, tarpick

FIX = Path(__file__).resolve().parent / "fixtures" / "inventory"
SITE = "opt/venv/lib/python3.11/site-packages"
# what dpkg leaves after `apt-get remove` (not purge) of a package with conffiles: not installed any more
REMOVED = """
Package: openssh-server
Status: deinstall ok config-files
Priority: optional
Section: net
Installed-Size: 1845
Maintainer: Debian OpenSSH Maintainers <debian-ssh@lists.debian.org>
Architecture: amd64
Source: openssh
Version: 1:9.2p1-2+deb12u10
Config-Version: 1:9.2p1-2+deb12u10
Description: secure shell (SSH) server, for secure access from remote machines
"""


def status_text() -> str:
    return (FIX / "dpkg-status").read_text()


def test_status_paragraphs_installed_packages():
    pkgs = {p.name: p for p in dpkg.parse_status(status_text() + REMOVED)}
    assert sorted(pkgs) == ["bash", "ca-certificates", "libc6", "libcap2-bin", "python3.11-minimal", "tini",
                            "tzdata"]
    libc = pkgs["libc6"]
    assert (libc.version, libc.architecture, libc.source, libc.source_version) == ("2.36-9+deb12u14", "amd64",
                                                                                 "glibc", "")
    assert libc.summary == "GNU C Library: Shared libraries"
    assert libc.homepage == "https://www.gnu.org/software/libc/libc.html"
    cap = pkgs["libcap2-bin"]
    assert (cap.source, cap.source_version) == ("libcap2", "1:2.66-4+deb12u3")  # binNMU: +b1 only on the binary
    assert cap.version == "1:2.66-4+deb12u3+b1"
    assert pkgs["tzdata"].architecture == "all"


def test_status_tolerates_junk_and_continuations():
    text = "Package: a\nStatus: install ok installed\nVersion: 1\nDescription: one\n two\n .\n three\nnot a field\n"
    (pkg,) = dpkg.parse_status(text)
    assert (pkg.name, pkg.version, pkg.summary) == ("a", "1", "one")
    assert dpkg.paragraphs(text)[0]["Description"] == "one\ntwo\n\nthree"
    assert dpkg.parse_status("Package: b\nStatus: install ok installed\n") == []  # no version: not a package


def test_copyright_licenses_dep5_and_free_form():
    assert dpkg.copyright_licenses((FIX / "tini.copyright").read_text()) == ("Expat",)
    assert dpkg.copyright_licenses((FIX / "libc6.copyright").read_text()) == ()


def test_read_database_status_status_d_and_licenses():
    found = {
        "var/lib/dpkg/status": (FIX / "dpkg-status").read_bytes(),
        "usr/share/doc/tini/copyright": (FIX / "tini.copyright").read_bytes(),
        "usr/share/doc/libc6/copyright": (FIX / "libc6.copyright").read_bytes(),
    }
    for entry in sorted((FIX / "status.d").iterdir()):
        found[f"var/lib/dpkg/status.d/{entry.name}"] = entry.read_bytes()
    pkgs = dpkg.read_database(found)
    names = [p.name for p in pkgs]
    assert names == sorted(names)
    assert {"base-files", "netbase", "libc6", "tini"} <= set(names)
    assert not any(n.endswith(".md5sums") for n in names) and len(names) == 9
    by = {p.name: p for p in pkgs}
    assert by["tini"].licenses == ("Expat",)
    assert by["libc6"].licenses == ()
    assert by["base-files"].version == "12.4+deb12u5" and by["netbase"].architecture == "all"


def test_distroless_status_d_only():
    found = {f"var/lib/dpkg/status.d/{p.name}": p.read_bytes() for p in (FIX / "status.d").iterdir()}
    assert [p.name for p in dpkg.read_database(found)] == ["base-files", "netbase"]


@pytest.mark.parametrize("path, wanted", [
    (f"{SITE}/torch-2.13.0+cpu.dist-info/METADATA", True),
    ("usr/lib/python3/dist-packages/crcmod-1.7.egg-info/PKG-INFO", True),
    ("usr/lib/python3/dist-packages/six-1.16.0.egg-info", True),  # distutils: the egg-info is the file itself
    ("usr/local/lib/python3.12/site-packages/numpy-2.0.0.dist-info/METADATA", True),
    (f"{SITE}/torch-2.13.0+cpu.dist-info/RECORD", False),
    (f"{SITE}/pip/_vendor/rich/METADATA", False),
    ("usr/share/python-wheels/pip-23.0.1-py3-none-any.whl", False),
])
def test_metadata_paths(path, wanted):
    assert pydist.wanted(path) is wanted
    assert tarpick.wanted(path) is wanted


def test_metadata_license_expression_and_project_url():
    d = pydist.parse_metadata((FIX / "torch.METADATA").read_text(), SITE)
    assert d is not None
    assert (d.name, d.version, d.key, d.location) == ("torch", "2.13.0+cpu", "torch", "/" + SITE)
    assert d.license_expression.startswith("Apache-2.0 AND ")
    assert d.homepage == "https://pytorch.org"
    assert d.license_classifiers == ()


def test_metadata_license_field_and_classifiers():
    pip = pydist.parse_metadata((FIX / "pip.METADATA").read_text(), SITE)
    assert pip is not None and (pip.license, pip.license_classifiers) == ("MIT", ("MIT License",))
    mp = pydist.parse_metadata((FIX / "mpmath.METADATA").read_text(), SITE)
    assert mp is not None and mp.license == "BSD" and mp.license_classifiers == ("BSD License",)
    crc = pydist.parse_metadata((FIX / "crcmod.PKG-INFO").read_text(), "usr/lib/python3/dist-packages")
    assert crc is not None and (crc.name, crc.version, crc.license) == ("crcmod", "1.7", "MIT")
    assert crc.homepage == "http://crcmod.sourceforge.net/"


def test_metadata_whole_license_text_is_not_a_name():
    text = (FIX / "pip.METADATA").read_text().replace(
        "License: MIT\n", "License: Copyright (c) 2008 The pip developers\n        Permission is hereby granted\n")
    pip = pydist.parse_metadata(text, SITE)
    assert pip is not None and pip.license == "" and pip.license_classifiers == ("MIT License",)
    assert pydist.parse_metadata("Metadata-Version: 2.1\nName: x\n", SITE) is None


def _tar(entries: dict[str, bytes | None], gz: bool = False) -> io.BytesIO:
    """A layer tar: path -> content (None: an empty directory)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def meta(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()


def test_layers_with_whiteouts_and_opaque_dirs():
    lower = _tar({
        "var/lib/dpkg/status": b"Package: a\nStatus: install ok installed\nVersion: 1\n",
        f"{SITE}/numpy-1.26.4.dist-info/METADATA": meta("numpy", "1.26.4"),
        f"{SITE}/six-1.16.0.dist-info/METADATA": meta("six", "1.16.0"),
        "usr/local/lib/python3.11/site-packages/old-1.0.dist-info/METADATA": meta("old", "1.0"),
        "etc/hostname": b"x\n",  # not wanted: never kept
    }, gz=True)
    upper = _tar({
        "./var/lib/dpkg/status": b"Package: a\nStatus: install ok installed\nVersion: 2\n",
        f"{SITE}/.wh.numpy-1.26.4.dist-info": b"",
        f"{SITE}/numpy-2.1.0.dist-info/METADATA": meta("numpy", "2.1.0"),
        "usr/local/lib/python3.11/site-packages/.wh..wh..opq": b"",
        "usr/local/lib/python3.11/site-packages/new-2.0.dist-info/METADATA": meta("new", "2.0"),
    })
    found = tarpick.collect([(lower, "gz"), (upper, "")])
    assert "etc/hostname" not in found
    assert [(d.name, d.version) for d in pydist.read_distributions(found)] == [
        ("new", "2.0"), ("numpy", "2.1.0"), ("six", "1.16.0")]
    assert [p.version for p in dpkg.read_database(found)] == ["2"]


def test_os_release():
    found = {"usr/lib/os-release": b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
                                   b'VERSION_ID="12"\nVERSION_CODENAME=bookworm\nID=debian\n'}
    rel = tarpick.os_release(found)
    assert (rel.id, rel.version_id, rel.codename, rel.pretty_name) == ("debian", "12", "bookworm",
                                                                       "Debian GNU/Linux 12 (bookworm)")
    ubuntu = tarpick.os_release({"etc/os-release": b"ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n"})
    assert ubuntu.id_like == ("debian",) and tarpick.os_release({}).id == ""


def test_layer_sizes_from_history_with_zero_size_steps():
    """A RUN that only deleted files made a (zero-size) layer, one that changed nothing made none: sizes still land
    on the right layers."""
    from _fake_engine import FakeEngine

    from imagebuild.inventory.local import _layers

    history = [  # newest first, as the engine answers
        {"Size": 0, "CreatedBy": "/bin/sh -c #(nop)  LABEL a=b"},
        {"Size": 0, "CreatedBy": "/bin/sh -c if [ -f /x ]; then rm -rf ...; fi"},  # dev: nothing removed: no layer
        {"Size": 500, "CreatedBy": "/bin/sh -c #(nop) COPY dir:abc in / "},
        {"Size": 0, "CreatedBy": "/bin/sh -c if [ -f /x ]; then rm -rf ...; fi"},  # runtime: whiteouts only
        {"Size": 900, "CreatedBy": "/bin/sh -c #(nop) COPY dir:def in / "},
        {"Size": 100, "CreatedBy": "imagebuild bootstrap"},
    ]

    engine = FakeEngine()
    engine.histories["sha256:x"] = history
    layers = _layers(engine, "sha256:x", ["d1", "d2", "d3", "d4"])
    assert [(layer.diff_id, layer.size) for layer in layers] == [("d1", 100), ("d2", 900), ("d3", 0), ("d4", 500)]
    assert all(layer.size is None for layer in _layers(engine, "sha256:x", ["d1", "d2"]))  # does not add up
