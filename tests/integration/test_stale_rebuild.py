"""Stale means rebuild, for real (issue 42 item 4): a Debian 12 base bootstrapped from bookworm main only (the point
release: older than bookworm-security's fixes) with bookworm-security in its apt sources, imported into the engine;
a one-image matrix built on it; `plan --security` marks it stale against the real signed index; `build
--security-refresh` rebuilds it (the apt step carries the index and upgrades the fixed packages), checks the rebuilt
image again and tests it; `plan --security` then says fresh, the record says why it was rebuilt, and a plain build
afterwards is up to date. The matrix's `audit:` policy gates `build --test`: the stale image fails it (exit 1, the
libssl3 fix named), the refreshed one passes (item 3).

make test proves the same flow over the one fake engine with the real index (tests/unit/test_security_refresh.py,
test_build_security_refresh_rebuilds_the_stale_images_and_their_children_over_the_fake_engine); this proves apt
really picks the fixes up (~30 s of mmdebstrap, two base builds, ~100 MB from the mirror)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest
from _helpers import imagebuild

pytestmark = pytest.mark.integration

MAIN = "deb http://deb.debian.org/debian bookworm main"
SOURCES = "deb http://deb.debian.org/debian bookworm main\\ndeb http://deb.debian.org/debian-security bookworm-security main\\n"


def _unavailable(why: str) -> None:
    if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def stale_os(client, tmp_path_factory):
    """bookworm main's minbase (+ libssl3, ca-certificates), its sources.list naming bookworm-security too."""
    if not shutil.which("mmdebstrap"):
        _unavailable("mmdebstrap is not installed (scripts/system-deps.sh)")
    tar = tmp_path_factory.mktemp("stale-os") / "rootfs.tar"
    done = subprocess.run(
        ["mmdebstrap", "--variant=minbase", "--include=libssl3,ca-certificates", "--format=tar",
         f"--customize-hook=printf '{SOURCES}' > \"$1/etc/apt/sources.list\"", "bookworm", str(tar), MAIN],
        capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        _unavailable(f"mmdebstrap of bookworm main failed (mirror not reachable?): {done.stderr[-600:]}")
    repo = f"ibsec-os-{uuid.uuid4().hex[:8]}/debian12"
    client.api.import_image(src=str(tar), repository=repo, tag="old", changes=['CMD ["bash"]'])
    yield f"{repo}:old"
    client.images.remove(f"{repo}:old", force=True)


@pytest.mark.full_tier
@pytest.mark.bootstrap
def test_security_refresh_rebuilds_a_stale_base_and_apt_takes_the_fixes(client, stale_os, tmp_path):
    name = f"ibsec{uuid.uuid4().hex[:8]}"
    matrix = tmp_path / f"{name}.yaml"
    matrix.write_text(f"""name: {name}
registry: ""
defaults:
  os: debian12
  python: "3.11"
  flavors: [base]
  tf32: false
  base_image: {stale_os}
  torchvision: false
  torchaudio: false
  transformer_engine: false
matrix:
  torch: ["2.13.0"]
  cuda: [cpu]
audit:
  fail_on: security-fix
""")
    env = {"IMAGEBUILD_STATE_DIR": str(tmp_path / "state")}
    common = ["-m", str(matrix), "--backend", "classic", "--no-registry-cache", "--no-sbom", "--plain"]

    def build(report: str, *extra: str) -> subprocess.CompletedProcess[str]:
        done = imagebuild("build", *common, "--report-dir", str(tmp_path / report), *extra, env=env, timeout=1500)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    def security() -> dict:
        done = imagebuild("plan", "-m", str(matrix), "--security", "--json", env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        (row,) = json.loads(done.stdout)
        return row

    try:
        build("r1")
        before = security()
        if before["security"]["state"] == "not checked" and "not reachable" in (before["security"]["why"] or ""):
            _unavailable(f"bookworm-security not reachable: {before['security']['why']}")
        assert before["security"]["state"] == "stale", before["security"]
        fixes = before["stale"]["security_fixes"]
        assert fixes > 0 and before["stale"]["index"].startswith("bookworm-security@")
        assert "libssl3" in {f["package"] for f in before["stale"]["fixes"]}  # main's point release is behind

        # the audit policy gates build --test: the stale image is built and passes its suite, and the build fails
        gated = imagebuild("build", *common, "--report-dir", str(tmp_path / "r1t"), "--test", env=env, timeout=1500)
        assert gated.returncode == 1, gated.stdout[-3000:] + gated.stderr[-3000:]
        lines = gated.stderr.splitlines()
        assert any(ln.startswith("audit:     libssl3 ") and "VIOLATION" in ln for ln in lines), gated.stderr[-3000:]
        assert any("violate the audit policy of" in ln and "the build fails (exit 1)" in ln for ln in lines)

        refreshed = build("r2", "--security-refresh")
        image = before["id"]
        assert f"security-refresh: {image}: stale: {fixes} security fixes" in refreshed.stderr
        assert f"security-refresh: {image} rebuilt: no fix open" in refreshed.stderr  # apt really took them
        log = (tmp_path / "r2" / "logs" / f"{image}.log").read_text()
        assert f"security-refresh {before['stale']['index']}" in log  # the key line was built
        after = security()
        assert after["stale"] is False and after["security"]["state"] == "fresh"
        assert after["security"]["image_id"] != before["security"]["image_id"]
        assert after["inputs_hash"] != before["inputs_hash"]

        record = json.loads(next((tmp_path / "state").glob("*.state.json")).read_text())
        entry = record["images"][before["id"]]
        assert entry["rebuilt_because"].startswith(f"security-refresh ({fixes} fixes: ")
        assert entry["rebuilt_because"].endswith("after the rebuild: no fix open")
        assert before["id"] in record["inputs"]["security_refresh"]
        assert any(t.get("image_id") == entry["image_id"] and t.get("failed") == 0 for t in record["tests"].values())

        again = build("r3")  # without the flag: the refresh is kept, nothing rebuilds
        out = again.stdout + again.stderr
        assert "1 up-to-date" in out and f"{image} building" not in out
    finally:
        for img in client.images.list(name=name):
            client.images.remove(img.id, force=True)
