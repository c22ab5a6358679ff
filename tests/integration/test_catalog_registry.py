"""`imagebuild catalog` against a real registry (Debian's docker-registry, htpasswd auth): tiny images carrying the
plan's io.imagebuild.* labels, pushed with the real `imagebuild push`; the catalog's digests and sizes must equal
what the registry serves (read here with plain HTTP, not with the catalog's client), its unpacked sizes what the
engine measured, and the tag that was not pushed is listed as such.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import urllib.request
from pathlib import Path

import pytest

from imagebuild.inputs import BuildInputs
from imagebuild.models import ImageResult
from imagebuild.plan import make_plan
from imagebuild.plan.tags import references
from imagebuild.record import store_result, test_key, updating
from imagebuild.record.update import record_build
from imagebuild.smoke import runner
from imagebuild.smokeresult import SmokeResult

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import PASSWORD, ROOT, USER, Images, imagebuild, ns  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
MATRIX = ROOT / "images" / "cpu.yaml"
ACCEPT = ", ".join(("application/vnd.oci.image.index.v1+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                    "application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.oci.image.manifest.v1+json"))


@pytest.fixture
def images(docker_client):
    imgs = Images(docker_client)
    yield imgs
    imgs.cleanup()


def served(address: str, repository: str, tag: str) -> tuple[str, dict]:
    """(digest, manifest) as the registry serves `repository:tag`, read with plain urllib + Basic auth."""
    req = urllib.request.Request(f"http://{address}/v2/{repository}/manifests/{tag}", headers={
        "Accept": ACCEPT, "Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()})
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = resp.read()
        assert resp.headers["Docker-Content-Digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
        return resp.headers["Docker-Content-Digest"], json.loads(body)


def test_catalog_reads_what_the_registry_serves(docker_client, registry, images, tmp_path):
    address = registry["REGISTRY"]
    prefix = f"{address}/{ns()}"
    plan = make_plan(MATRIX, None, prefix)
    base, runtime, dev = plan.images
    created = "2026-11-30T12:00:00Z"
    parent = None
    ids = {}
    for image, size in ((base, 300_000), (runtime, 200_000), (dev, 100_000)):
        # the plan's labels, as a build sets them (the inputs hash is how push finds the image in the engine)
        labels = {**image.labels, "io.imagebuild.inputs-hash": image.inputs_hash,
                  "org.opencontainers.image.created": created}
        parent = images.build({f"{image.flavor}.bin": image.tag.encode() * (size // len(image.tag))}, parent,
                              image.tag, labels=labels)
        ids[image.tag] = parent
        images.refs.update(references(image))
    # the matrix's record as `build` and `test` on a host without GPUs write it (the smoke counts are this test's
    # data: tiny FROM-scratch images cannot run the suite), through the record's own API
    state = tmp_path / "state"
    results = []
    for image in plan.images:
        row = ImageResult.of(image)
        info = docker_client.api.inspect_image(image.tag)
        row.status, row.image_id, row.size = "built", info["Id"], info["Size"]
        results.append(row)
    suite, options = runner.suite_version(), {"require_gpu": False, "perf": False}
    with updating(MATRIX, BuildInputs(), prefix, directory=state, replace_inputs=True) as rec:
        record_build(rec, plan, results)
        for image in (base, runtime):
            expect = runner.expectations_for(image)
            key = test_key(ids[image.tag], suite, expect, options, "cpu")
            store_result(rec, key, ids[image.tag], suite, expect, options, "cpu",
                         SmokeResult(passed=7, failed=0, skipped=2))
    env = {"IMAGEBUILD_REGISTRY_USER": USER, "IMAGEBUILD_REGISTRY_PASSWORD": PASSWORD,
           "IMAGEBUILD_STATE_DIR": str(state)}
    pushed = imagebuild("push", "--matrix", str(MATRIX), "--registry", prefix, "--only", "*-base,*-runtime",
                        "--report-dir", str(tmp_path / "reports"), env=env, timeout=600)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    out = tmp_path / "catalog.json"
    r = imagebuild("catalog", "--matrix", str(MATRIX), "--state-dir", str(state), "--json", "-o", str(out),
                   "-u", USER, "--password-stdin", stdin=PASSWORD + "\n",
                   env={"DOCKER_CONFIG": str(tmp_path / "nodocker")}, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["registry"] == prefix and doc["matrix"] == str(MATRIX)  # the registry the record's build used
    entries = {e["reference"]: e for e in doc["entries"]}
    assert list(entries) == [ref for image in plan.images for ref in references(image)]
    for image in (base, runtime):
        for ref in references(image):
            e = entries[ref]
            repository, tag = ref.split("/", 1)[1].rsplit(":", 1)
            digest, manifest = served(address, repository, tag)
            assert e["pushed"] and e["digest"] == digest
            assert e["compressed"] == sum(layer["size"] for layer in manifest["layers"]) > 0
            assert e["config_digest"] == manifest["config"]["digest"] == ids[image.tag]  # = the engine's image ID
            assert e["uncompressed"] == docker_client.api.inspect_image(image.tag)["Size"]
            assert e["flavor"] == image.flavor and e["created"] == created
            assert e["versions"]["python"] == "3.11" and e["versions"]["os"] == "debian12"
            assert {k: e["smoke"][k] for k in ("passed", "failed", "skipped", "ran_on")} == \
                {"passed": 7, "failed": 0, "skipped": 2, "ran_on": "CPU host"}
    assert entries[runtime.tag]["versions"]["torch"] == runtime.variant.versions.torch
    assert entries[base.tag]["versions"]["torch"] is None  # the base holds no torch and its labels say so
    for ref in references(dev):
        assert not entries[ref]["pushed"] and entries[ref]["digest"] is None

    md = imagebuild("catalog", "--matrix", str(MATRIX), "--registry", prefix,
                    env={**env, "DOCKER_CONFIG": str(tmp_path / "nodocker")}, timeout=300)
    assert md.returncode == 0, md.stderr
    print("\n" + md.stdout)
    assert md.stdout.startswith(f"# Images in `{prefix}`\n")
    row = next(line for line in md.stdout.splitlines() if line.startswith(f"| `{runtime.short_tag}` |"))
    assert f"`{entries[runtime.tag]['digest']}`" in row and "✅ 7/0/2 | CPU host | 2026-11-30 |" in row
    assert "**not pushed**" in next(line for line in md.stdout.splitlines() if f"`{dev.short_tag}`" in line)

    wrong = imagebuild("catalog", "--matrix", str(MATRIX), "--registry", prefix, "-u", USER, "--password-stdin",
                       stdin="not-the-password\n", env={"DOCKER_CONFIG": str(tmp_path / "nodocker")}, timeout=300)
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr.strip().startswith("error: ") and len(wrong.stderr.strip().splitlines()) == 1
    assert "not-the-password" not in wrong.stderr
