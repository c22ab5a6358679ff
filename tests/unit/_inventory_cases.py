"""Inventories built from the recorded fixture files, shared by the SBOM and diff unit tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from imagebuild.inventory import dpkg, pydist
from imagebuild.inventory.model import Inventory, Layer, OSRelease

FIX = Path(__file__).resolve().parent / "fixtures" / "inventory"
SITE = "opt/venv/lib/python3.11/site-packages"
DEBIAN12 = OSRelease(id="debian", version_id="12", codename="bookworm", pretty_name="Debian GNU/Linux 12 (bookworm)")


def fixture_inventory(**changes) -> Inventory:
    found = {"var/lib/dpkg/status": (FIX / "dpkg-status").read_bytes(),
             "usr/share/doc/tini/copyright": (FIX / "tini.copyright").read_bytes()}
    for name in ("torch", "pip", "mpmath"):
        version = {"torch": "2.13.0+cpu", "pip": "23.0.1", "mpmath": "1.3.0"}[name]
        found[f"{SITE}/{name}-{version}.dist-info/METADATA"] = (FIX / f"{name}.METADATA").read_bytes()
    found["usr/lib/python3/dist-packages/crcmod-1.7.egg-info/PKG-INFO"] = (FIX / "crcmod.PKG-INFO").read_bytes()
    inv = Inventory(
        reference="example.internal:5000/ml/pytorch:2.13.0-cpu-runtime",
        image_id="sha256:" + "ab" * 32,
        created="2026-11-30T20:01:02.123456789Z",
        architecture="amd64",
        os="linux",
        repo_digests=("example.internal:5000/ml/pytorch@sha256:" + "cd" * 32,),
        labels={"io.imagebuild.torch": "2.13.0", "io.imagebuild.flavor": "runtime",
                "org.opencontainers.image.created": "2026-11-30T20:00:00Z", "maintainer": "ml-infra"},
        layers=(Layer("sha256:" + "01" * 32, 170_000_000, "/bin/sh -c #(nop) ADD file:x in / "),
                Layer("sha256:" + "02" * 32, 900_000_000, "/bin/sh -c pip install torch")),
        os_release=DEBIAN12,
        debs=tuple(dpkg.read_database(found)),
        pythons=tuple(pydist.read_distributions(found)),
    )
    return dataclasses.replace(inv, **changes)
