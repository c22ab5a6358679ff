"""The shipped CPU matrix, built for real: bootstrap Debian 12 base, torch CPU from the wheelhouse, base/runtime/dev.

Checked from outside: labels, versions inside, non-root default user, FROM chain by image ID, no wheelhouse or proxy
settings in the images, and a second build that is all "up to date". On a fresh engine (CI) this is a cold build
(~5 min on 2 cores); on a warm one `--force` still makes this run build every image (from the layer cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from imagebuild.build import connect
from imagebuild.build.executor import BASE_LABEL, INPUTS_LABEL
from imagebuild.errors import EngineUnavailable
from imagebuild.inputs import BuildInputs

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = Path(os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels")
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
REGISTRY = f"ibdev-build-{uuid.uuid4().hex[:8]}"


def _args(tmp: Path) -> list[str]:
    return ["--matrix", str(ROOT / "images" / "cpu.yaml"), "--registry", REGISTRY, "--wheelhouse", str(WHEELHOUSE),
            "--ca-cert", CA, "--torch-index-url", "none", "--plain", "--log-dir", str(tmp / "logs"),
            "--report-dir", str(tmp / "report")]


def _imagebuild(args: list[str], env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "imagebuild", "build", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=1800)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")):
        pytest.skip(f"no torch 2.13.0 cp311 wheel in {WHEELHOUSE}")
    try:
        client = connect(timeout=600)
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    from imagebuild.plan import make_plan

    tmp = tmp_path_factory.mktemp("cpu")
    plan = make_plan(ROOT / "images" / "cpu.yaml", BuildInputs(ca_certs=(Path(CA),), torch_index_url="none",
                                                               wheelhouse=WHEELHOUSE), REGISTRY)
    first = _imagebuild([*_args(tmp), "--force"], {"no_proxy": "ibtest-noproxy.invalid"})
    yield client, plan, first, tmp
    ours = set()
    for img in plan.images:
        try:
            ours.add(client.api.inspect_image(img.tag)["Id"])
        except Exception:
            pass
    for img in plan.images:
        for ref in (img.tag, *img.aliases):
            try:
                client.api.remove_image(ref if ":" in ref.rsplit("/", 1)[-1] else f"{img.repository}:{ref}")
            except Exception:
                pass
    # builder stages (pip, ...) stay behind as untagged images FROM our images: remove them too
    for entry in client.api.images(filters={"dangling": True}):
        try:
            if ours & {h["Id"] for h in client.api.history(entry["Id"])}:
                client.api.remove_image(entry["Id"])
        except Exception:
            pass
    client.close()


def test_cpu_matrix_builds_every_image(built):
    client, plan, first, tmp = built
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert [i.flavor for i in plan.images] == ["base", "runtime", "dev"]
    assert "3 built" in first.stdout
    report = json.loads((tmp / "report" / "build-report.json").read_text())
    assert report  # the report stage wrote something


def test_labels_and_from_chain_by_image_id(built):
    client, plan, first, _ = built
    ids = {}
    for img in plan.images:
        info = client.api.inspect_image(img.tag)
        ids[img.tag] = info["Id"]
        labels = info["Config"]["Labels"]
        assert labels[INPUTS_LABEL] == img.inputs_hash
        assert labels["io.imagebuild.flavor"] == img.flavor
        assert labels["io.imagebuild.torch"] == "2.13.0" and labels["io.imagebuild.cuda"] == "cpu"
        assert labels["io.imagebuild.python"] == "3.11" and labels["io.imagebuild.os"] == "debian12"
        assert labels["org.opencontainers.image.created"] and labels["org.opencontainers.image.revision"]
        if img.parent:
            assert labels[BASE_LABEL] == ids[img.parent]
            assert ids[img.parent] in {h["Id"] for h in client.api.history(img.tag)}
        else:
            boot = client.api.inspect_image(labels[BASE_LABEL])
            assert boot["Config"]["Labels"]["io.imagebuild.bootstrap-hash"]


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


def test_second_build_is_all_up_to_date(built):
    _, _, first, tmp = built
    assert first.returncode == 0
    again = _imagebuild(_args(tmp))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "3 up-to-date" in again.stdout, again.stdout[-3000:]
