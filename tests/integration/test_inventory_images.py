"""`imagebuild sbom` and `imagebuild diff` on the real CPU matrix images (session fixture `cpu_build`), a tiny image
derived from runtime (one wheel pip-installed, one deb purged), and a matrix image read back from the real htpasswd
registry by streaming its layer blobs: the base in make test, the runtime (a 100 s push of its layers) in the full
tier."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import secrets
import zipfile

import pytest
from _helpers import imagebuild

from imagebuild.render.data import DEV_APT, JUPYTERLAB_VERSION

pytestmark = pytest.mark.integration

PROBE = "ibsbomprobe"  # the wheel the derived image installs (made here: /opt/wheels holds only torch)
PURGED = "tini"  # a leaf package of base and runtime: nothing depends on it (the derived image never runs)


@pytest.fixture(scope="module")
def images(cpu_build):
    assert cpu_build.result.returncode == 0, cpu_build.result.stdout[-3000:] + cpu_build.result.stderr[-3000:]
    by_flavor = {i.flavor: i for i in cpu_build.plan.images}
    return cpu_build, by_flavor["runtime"], by_flavor["dev"]


def _wheel() -> tuple[str, bytes]:
    name = f"{PROBE}-1.0-py3-none-any.whl"
    files = {
        f"{PROBE}/__init__.py": b"VALUE = 1\n",
        f"{PROBE}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\nLicense: MIT\n"
                                           .encode(),
        f"{PROBE}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                        b"Tag: py3-none-any\n",
    }
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
        for p, d in files.items()) + f"{PROBE}-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p, d in {**files, f"{PROBE}-1.0.dist-info/RECORD": record.encode()}.items():
            zf.writestr(zipfile.ZipInfo(p, (2023, 11, 14, 22, 13, 20)), d)
    return name, buf.getvalue()


def _derive_changed(derive, parent: str, name: str) -> str:
    """`parent` plus one wheel installed and one package purged, from the run's image provider."""
    wheel_name, wheel = _wheel()
    return derive(name, parent, f"USER root\nCOPY {wheel_name} /tmp/\n"
                  f"RUN pip install --no-index --no-deps /tmp/{wheel_name} && rm /tmp/{wheel_name} "
                  f"&& dpkg --purge {PURGED}\nUSER ml\n", files={wheel_name: wheel})


@pytest.fixture(scope="module")
def derived(images, derive):
    """The runtime plus one wheel installed and one package purged."""
    return _derive_changed(derive, images[1].tag, "inventory")


def test_sbom_of_runtime_validates_and_holds_torch_and_libc(images, tmp_path):
    build, runtime, _ = images
    out = tmp_path / "runtime.cdx.json"
    res = imagebuild("sbom", runtime.tag, "-o", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    labels = {p["name"]: p["value"] for p in doc["metadata"]["properties"]}
    torch = [c for c in doc["components"] if c.get("purl", "").startswith("pkg:pypi/torch@")]
    assert len(torch) == 1
    assert torch[0]["version"].split("+")[0] == labels["io.imagebuild.torch"] == runtime.variant.versions.torch
    libc = [c for c in doc["components"] if c["name"] == "libc6"]
    assert len(libc) == 1 and libc[0]["purl"].startswith("pkg:deb/debian/libc6@")
    assert "distro=debian-12" in libc[0]["purl"]
    assert doc["metadata"]["component"]["version"] == build.client.images.get(runtime.tag).id
    # same image, same bytes (stdout this time)
    again = imagebuild("sbom", runtime.tag)
    assert again.returncode == 0 and again.stdout == text


def test_diff_runtime_dev_shows_the_dev_additions(images):
    build, runtime, dev = images
    res = imagebuild("diff", runtime.tag, dev.tag, "--json")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    os_added = {c["name"] for c in d["os_added"]}
    assert set(DEV_APT) | {f"python{runtime.variant.versions.python}-dev"} <= os_added
    assert {"name": "jupyterlab", "old": "", "new": JUPYTERLAB_VERSION} in d["py_added"]
    assert d["os_removed"] == d["py_removed"] == [] and not d["same_image"]
    assert [c for c in d["labels"] if c["name"] == "io.imagebuild.flavor"] == [
        {"name": "io.imagebuild.flavor", "old": "runtime", "new": "dev"}]
    runtime_layers = build.client.images.get(runtime.tag).attrs["RootFS"]["Layers"]
    assert [r["diff_id"] for r in d["layers"] if r["in_a"]] == runtime_layers
    assert all(r["in_b"] for r in d["layers"])  # dev is FROM runtime: every runtime layer is shared
    assert d["totals"]["shared"] == d["totals"]["a"] and d["totals"]["b"] > d["totals"]["a"] > 0


def test_diff_of_a_derived_image_shows_exactly_that_change(images, derived):
    _, runtime, _ = images
    res = imagebuild("diff", runtime.tag, derived)
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "OS packages: 0 added, 1 removed, 0 changed\n" in text
    assert f"\n  - {PURGED} " in text
    assert f"Python packages: 1 added, 0 removed, 0 changed\n  + {PROBE} 1.0\n" in text
    as_json = json.loads(imagebuild("diff", runtime.tag, derived, "--json").stdout)
    assert [c["name"] for c in as_json["os_removed"]] == [PURGED] and as_json["os_added"] == []
    assert as_json["py_added"] == [{"name": PROBE, "old": "", "new": "1.0"}]
    assert as_json["os_changed"] == as_json["py_changed"] == as_json["py_removed"] == []


@pytest.mark.parametrize("flavor", ["base", pytest.param("runtime", marks=pytest.mark.full_tier)])
def test_registry_reference_reads_layer_blobs(images, derive, flavor):
    """A matrix image pushed under another name, the local tag removed: diff and sbom read it from the registry and
    find the very image the engine has (same config digest, same packages, every layer shared)."""
    build = images[0]
    image = next(i for i in build.plan.images if i.flavor == flavor)
    derived = _derive_changed(derive, image.tag, f"inventory-{flavor}")
    client, reg = build.client, build.registry
    local_id = client.images.get(image.tag).id
    ref = f"{build.prefix}/inventory-probe:{flavor}"
    repo, tag = ref.rsplit(":", 1)
    client.api.tag(local_id, repo, tag)
    try:
        for chunk in client.api.push(repo, tag, stream=True, decode=True,
                                     auth_config={"username": reg.user, "password": reg.password}):
            assert "error" not in chunk, chunk
    finally:
        client.api.remove_image(ref)
    env = {"IMAGEBUILD_REGISTRY_USER": reg.user, "IMAGEBUILD_REGISTRY_PASSWORD": reg.password}
    res = imagebuild("diff", ref, image.tag, "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert f"reading {ref} from registry" in res.stderr and reg.password not in res.stderr + res.stdout
    d = json.loads(res.stdout)
    assert d["same_image"] and d["a_id"] == local_id
    assert not d["packages_changed"] and d["labels"] == []
    assert all(r["in_a"] and r["in_b"] for r in d["layers"])
    assert (d["size_kind_a"], d["size_kind_b"]) == ("compressed", "uncompressed")
    # a registry image against a local derived one: the same change as locally
    d2 = json.loads(imagebuild("diff", f"docker://{ref}", derived, "--json", env=env).stdout)
    assert [c["name"] for c in d2["os_removed"]] == [PURGED] and [c["name"] for c in d2["py_added"]] == [PROBE]
    local_sbom = json.loads(imagebuild("sbom", image.tag).stdout)
    remote_sbom = json.loads(imagebuild("sbom", ref, env=env).stdout)
    assert remote_sbom["components"] == local_sbom["components"]
    assert remote_sbom["serialNumber"] == local_sbom["serialNumber"]


@pytest.mark.parametrize("command", ["sbom", "diff"])
def test_unknown_reference_exits_1_naming_it(images, command):
    build, runtime, _ = images
    missing = f"ibtest-no-such-image-{secrets.token_hex(3)}:nope"
    args = [missing] if command == "sbom" else [runtime.tag, missing]
    res = imagebuild(command, *args)
    assert res.returncode == 1
    assert res.stderr.startswith("error: ") and missing in res.stderr and len(res.stderr.splitlines()) == 1
    remote = f"{build.registry.address}/ibtest-nothing/here:{secrets.token_hex(3)}"
    env = {"IMAGEBUILD_REGISTRY_USER": build.registry.user, "IMAGEBUILD_REGISTRY_PASSWORD": build.registry.password}
    res = imagebuild(command, *([remote] if command == "sbom" else [remote, runtime.tag]), env=env)
    assert res.returncode == 1 and remote in res.stderr and res.stderr.splitlines()[-1].startswith("error: ")
    leftovers = build.client.containers.list(all=True, filters={"label": "io.imagebuild.purpose=inventory"})
    assert leftovers == []
