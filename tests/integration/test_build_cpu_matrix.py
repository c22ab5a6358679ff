"""The shipped CPU matrix, built for real: bootstrap Debian 12 base, torch CPU from the wheelhouse, base/runtime/dev.

Checked from outside: labels, versions inside, non-root default user, FROM chain by image ID, no wheelhouse or proxy
settings in the images, and a second build that is all "up to date". On a fresh engine (CI) this is a cold build
(~5 min on 2 cores); on a warm one `--force` still makes this run build every image (from the layer cache).
"""

from __future__ import annotations

import json

import pytest
from _helpers import imagebuild

from imagebuild.builder.bootstrap import spec_for
from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def built(cpu_build):
    """The session's real build of images/cpu.yaml (tests/integration/conftest.py)."""
    return cpu_build.client, cpu_build.plan, cpu_build.result, cpu_build.tmp


def test_cpu_matrix_builds_every_image(built):
    client, plan, first, tmp = built
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert [i.flavor for i in plan.images] == ["base", "runtime", "dev"]
    assert "3 built" in first.stdout
    report = json.loads((tmp / "report" / "build-report.json").read_text())
    assert report["run"]["command"] == "build" and report["matrix"].endswith("cpu.yaml")
    # one CycloneDX SBOM per image beside the report, its digest in the report, made from the image itself
    import hashlib

    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    for row, img in zip(report["images"], plan.images, strict=True):
        sbom = row["sbom"]
        text = (tmp / "report" / "sbom" / f"{img.id}.cdx.json").read_text()
        assert sbom["sha256"] == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        assert sbom["image_id"] == client.api.inspect_image(img.tag)["Id"]
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
        names = {c["name"] for c in json.loads(text)["components"]}
        assert "libc6" in names and (img.flavor == "base" or "torch" in names)


def test_labels_and_from_chain_by_image_id(built):
    client, plan, first, _ = built
    ids = {}
    for img in plan.images:
        info = client.api.inspect_image(img.tag)
        ids[img.tag] = info["Id"]
        labels = info["Config"]["Labels"]
        assert labels[INPUTS_LABEL] == img.inputs_hash
        assert labels["io.imagebuild.flavor"] == img.flavor
        assert labels["io.imagebuild.cuda"] == "cpu"
        assert labels.get("io.imagebuild.torch") == (None if img.flavor == "base" else "2.13.0")
        assert labels["io.imagebuild.python"] == "3.11" and labels["io.imagebuild.os"] == "debian12"
        assert labels["org.opencontainers.image.created"] and labels["org.opencontainers.image.revision"]
        below = client.api.inspect_image(ids[img.parent] if img.parent else spec_for(img.variant).tag)
        assert info["RootFS"]["Layers"][:len(below["RootFS"]["Layers"])] == below["RootFS"]["Layers"]  # stands on it
        assert below["Id"] in {h["Id"] for h in client.api.history(img.tag)}  # FROM its image ID
        if not img.parent:  # a root names the OS image it was built on; a child names no parent
            assert below["Config"]["Labels"]["io.imagebuild.bootstrap-hash"] and labels[BASE_LABEL] == below["Id"]
        else:
            assert labels[BASE_LABEL] == ""  # empty, not the root's inherited


def test_inside_runtime_and_dev(built):
    client, plan, _, _ = built
    for img in plan.images[1:]:
        out = client.containers.run(
            img.tag, ["python", "-c", "import os, sys, torch; print(torch.__version__, sys.version_info[:2] == (3, 11),"
                      " os.getuid(), os.getcwd())"], network_mode="none", remove=True).decode().split()
        assert out == ["2.13.0+cpu", "True", "1000", "/workspace"], out
        info = client.api.inspect_image(img.tag)
        assert info["Config"]["User"] in ("ml", "1000", "1000:1000", "ml:ml")
        env = "\n".join(info["Config"]["Env"] or [])
        assert "proxy" not in env.lower()  # proxies were build args only
        history = json.dumps(client.api.history(img.tag))
        assert "ibtest-noproxy.invalid" not in history
        found = client.containers.run(img.tag, ["sh", "-c", "find / -xdev \\( -name 'torch-*.whl' -o -name 'wheelhouse' \\) "
                                                  "2>/dev/null | head -3"],
                                      network_mode="none", remove=True, user="root").decode().strip()
        assert found == "", f"wheels left in {img.tag}: {found}"


def test_second_build_is_all_up_to_date(cpu_build):
    first = cpu_build.result
    assert first.returncode == 0
    again = imagebuild("build", *cpu_build.build_args())
    assert again.returncode == 0, again.stdout[-3000:]
    assert "3 up-to-date" in again.stdout, again.stdout[-3000:]
