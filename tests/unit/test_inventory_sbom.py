"""The CycloneDX SBOM of an inventory: schema-valid (cyclonedx-python-lib's strict validator), purls that scanners
match, deterministic bytes, wheel hashes when given."""

from __future__ import annotations

import dataclasses
import json

import pytest
from _inventory_cases import fixture_inventory

from imagebuild.inventory import dump_sbom, make_sbom
from imagebuild.inventory.cyclonedx import deb_purl, pypi_purl, timestamp

NO_EPOCH: dict[str, str] = {}


def validate(text: str) -> None:
    pytest.importorskip("cyclonedx", reason="cyclonedx-python-lib (dev extra) validates the schema")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert error is None, str(error)


def test_sbom_validates_against_the_1_6_schema():
    text = dump_sbom(make_sbom(fixture_inventory(), {("torch", "2.13.0+cpu"): "0f" * 32}, env=NO_EPOCH))
    validate(text)
    doc = json.loads(text)
    assert doc["specVersion"] == "1.6" and doc["bomFormat"] == "CycloneDX"


def test_schema_validator_rejects_a_broken_sbom():
    """The check above can fail: a component without a name is refused."""
    doc = make_sbom(fixture_inventory(), env=NO_EPOCH)
    del doc["components"][1]["name"]
    with pytest.raises(AssertionError):
        validate(json.dumps(doc))


def test_components_purls_licenses():
    doc = make_sbom(fixture_inventory(), env=NO_EPOCH)
    by_name = {c["name"]: c for c in doc["components"]}
    assert by_name["debian"]["type"] == "operating-system" and by_name["debian"]["version"] == "12"
    assert by_name["libc6"]["purl"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=amd64&distro=debian-12"
    assert by_name["libcap2-bin"]["purl"].startswith("pkg:deb/debian/libcap2-bin@1%3A2.66-4%2Bdeb12u3%2Bb1?")
    assert by_name["tini"]["licenses"] == [{"license": {"name": "Expat"}}]
    torch = by_name["torch"]
    assert torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu" and torch["version"] == "2.13.0+cpu"
    assert torch["licenses"][0]["expression"].startswith("Apache-2.0 AND")
    assert by_name["pip"]["licenses"] == [{"license": {"name": "MIT"}}]
    assert {"name": "imagebuild:python:location", "value": "/usr/lib/python3/dist-packages"} in \
        by_name["crcmod"]["properties"]
    assert "hashes" not in torch


def test_components_sorted_and_refs_unique():
    doc = make_sbom(fixture_inventory(), env=NO_EPOCH)
    debs = [c["name"] for c in doc["components"] if c.get("purl", "").startswith("pkg:deb/")]
    pys = [c["purl"] for c in doc["components"] if c.get("purl", "").startswith("pkg:pypi/")]
    assert debs == sorted(debs) and pys == sorted(pys)
    refs = [c["bom-ref"] for c in doc["components"]]
    assert len(refs) == len(set(refs))


def test_same_distribution_in_two_places_gets_two_refs():
    inv = fixture_inventory()
    torch = next(d for d in inv.pythons if d.name == "torch")
    twice = dataclasses.replace(inv, pythons=(*inv.pythons, dataclasses.replace(torch, location="/usr/lib/x")))
    text = dump_sbom(make_sbom(twice, env=NO_EPOCH))
    validate(text)  # consumers (and CycloneDX) need unique bom-refs
    refs = [c["bom-ref"] for c in json.loads(text)["components"] if c["name"] == "torch"]
    assert len(refs) == 2 and len(set(refs)) == 2


def test_metadata_labels_image_and_digest():
    doc = make_sbom(fixture_inventory(), env=NO_EPOCH)
    meta = doc["metadata"]
    props = {p["name"]: p["value"] for p in meta["properties"]}
    assert props["io.imagebuild.torch"] == "2.13.0" and props["maintainer"] == "ml-infra"
    assert props["imagebuild:image:id"] == "sha256:" + "ab" * 32
    comp = meta["component"]
    assert comp["type"] == "container" and comp["version"] == "sha256:" + "ab" * 32
    assert comp["purl"] == ("pkg:oci/pytorch@sha256%3A" + "cd" * 32
                            + "?repository_url=example.internal%3A5000%2Fml%2Fpytorch")


def test_deterministic_serial_and_timestamp():
    a = dump_sbom(make_sbom(fixture_inventory(), env=NO_EPOCH))
    b = dump_sbom(make_sbom(fixture_inventory(), env=NO_EPOCH))
    assert a == b
    doc = json.loads(a)
    assert doc["metadata"]["timestamp"] == "2026-11-30T20:01:02Z"  # the image's created, not the clock
    other = make_sbom(fixture_inventory(image_id="sha256:" + "ef" * 32), env=NO_EPOCH)
    assert other["serialNumber"] != doc["serialNumber"] and doc["serialNumber"].startswith("urn:uuid:")
    assert timestamp(fixture_inventory(), {"SOURCE_DATE_EPOCH": "1700000000"}) == "2023-11-14T22:13:20Z"
    assert timestamp(fixture_inventory(created="garbage"), NO_EPOCH) == "1970-01-01T00:00:00Z"


def test_wheel_hashes_by_any_spelling():
    sha = "9a" * 32
    doc = make_sbom(fixture_inventory(), {("Torch", "2.13.0+cpu"): sha, ("numpy", "9.9"): "00" * 32}, env=NO_EPOCH)
    torch = next(c for c in doc["components"] if c["name"] == "torch")
    assert torch["hashes"] == [{"alg": "SHA-256", "content": sha}]
    assert sum("hashes" in c for c in doc["components"]) == 1
    assert doc["serialNumber"] != make_sbom(fixture_inventory(), env=NO_EPOCH)["serialNumber"]


def test_purl_helpers_ubuntu_and_names():
    inv = fixture_inventory()
    ubuntu = dataclasses.replace(inv, os_release=dataclasses.replace(inv.os_release, id="ubuntu", version_id="24.04"))
    assert deb_purl(inv.debs[0], ubuntu).startswith(f"pkg:deb/ubuntu/{inv.debs[0].name}@")
    assert "distro=ubuntu-24.04" in deb_purl(inv.debs[0], ubuntu)
    crc = next(d for d in inv.pythons if d.name == "crcmod")
    assert pypi_purl(dataclasses.replace(crc, name="Typing_Extensions", version="4.12.2")) == \
        "pkg:pypi/typing-extensions@4.12.2"
