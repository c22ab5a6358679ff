"""diff(a, b) over two inventories: packages added / removed / changed, version labels, layers and totals; the
text and JSON forms."""

from __future__ import annotations

import dataclasses
import json

from _inventory_cases import fixture_inventory

from imagebuild.inventory import Layer, diff, diff_to_json, format_diff
from imagebuild.inventory.model import DebPackage, PyDist


def pair():
    a = fixture_inventory()
    debs = [d for d in a.debs if d.name != "tini"]  # removed
    debs = [dataclasses.replace(d, version="2.36-9+deb12u15") if d.name == "libc6" else d for d in debs]
    debs.append(DebPackage("git", "1:2.39.5-0+deb12u3", "amd64"))
    debs.append(DebPackage("libc6", "2.36-9+deb12u15", "i386"))  # foreign arch: its own entry
    pys = [p for p in a.pythons if p.name != "crcmod"]
    pys = [dataclasses.replace(p, version="24.0") if p.name == "pip" else p for p in pys]
    pys.append(PyDist("Jupyter_Core", "5.9.1", "/opt/venv/lib/python3.11/site-packages"))
    b = dataclasses.replace(
        a, reference="local:dev", image_id="sha256:" + "ee" * 32, debs=tuple(sorted(debs, key=lambda d: d.name)),
        pythons=tuple(pys),
        labels={**a.labels, "io.imagebuild.flavor": "dev", "org.opencontainers.image.created": "2026-12-01T00:00:00Z",
                "maintainer": "someone else"},
        layers=(*a.layers, Layer("sha256:" + "03" * 32, 150_000_000, "RUN apt-get install git")),
    )
    return a, b


def test_packages_added_removed_changed():
    a, b = pair()
    d = diff(a, b)
    assert [(c.name, c.new) for c in d.os_added] == [("git", "1:2.39.5-0+deb12u3"), ("libc6:i386", "2.36-9+deb12u15")]
    assert [(c.name, c.old) for c in d.os_removed] == [("tini", "0.19.0-1+b3")]
    assert [(c.name, c.old, c.new) for c in d.os_changed] == [("libc6", "2.36-9+deb12u14", "2.36-9+deb12u15")]
    assert [(c.name, c.new) for c in d.py_added] == [("jupyter-core", "5.9.1")]
    assert [c.name for c in d.py_removed] == ["crcmod"]
    assert [(c.name, c.old, c.new) for c in d.py_changed] == [("pip", "23.0.1", "24.0")]
    assert d.packages_changed and not d.same_image


def test_only_version_labels_compared():
    a, b = pair()
    assert [(c.name, c.old, c.new) for c in diff(a, b).labels] == [
        ("io.imagebuild.flavor", "runtime", "dev"),
        ("org.opencontainers.image.created", "2026-11-30T20:00:00Z", "2026-12-01T00:00:00Z")]


def test_layers_shared_and_totals():
    a, b = pair()
    d = diff(a, b)
    assert [(r.in_a, r.in_b) for r in d.layers] == [(True, True), (True, True), (False, True)]
    assert d.totals == {"a": 1_070_000_000, "b": 1_220_000_000, "shared": 1_070_000_000}
    unknown = dataclasses.replace(b, layers=(Layer("sha256:" + "01" * 32, None),))
    assert diff(a, unknown).totals["b"] is None


def test_same_image_is_empty():
    a = fixture_inventory()
    d = diff(a, a)
    assert d.same_image and not d.packages_changed and d.labels == ()
    assert "same image" in format_diff(d)


def test_text_and_json():
    a, b = pair()
    d = diff(a, b)
    text = format_diff(d)
    assert "OS packages: 2 added, 1 removed, 1 changed" in text
    assert "  ~ libc6 2.36-9+deb12u14 → 2.36-9+deb12u15" in text
    assert "  - crcmod 1.7" in text and "  + jupyter-core 5.9.1" in text
    assert "layers (uncompressed sizes): A 2, B 3, 2 shared" in text
    assert "    B  030303030303   150.0 MB  RUN apt-get install git" in text
    assert "  A B  010101010101   170.0 MB  ADD file:x in /" in text  # the shell prefix is cut
    assert "total: A 1.1 GB, B 1.2 GB, shared 1.1 GB" in text
    data = json.loads(json.dumps(diff_to_json(d)))
    assert data["os_changed"] == [{"name": "libc6", "old": "2.36-9+deb12u14", "new": "2.36-9+deb12u15"}]
    assert data["packages_changed"] is True and data["totals"]["b"] == 1_220_000_000
