"""The lock for real: `imagebuild lock` against PyPI + the wheelhouse, then builds that install exactly the locked files
(pip --require-hashes) and apt versions, and a build that pip refuses because a locked hash was tampered with.

A small matrix of our own (the CPU variant of images/cpu.yaml, `six` as the base's pip package) keeps this fast; the
runtime test installs the real torch CPU wheel from the wheelhouse with its hash checked.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
from _helpers import imagebuild

pytestmark = pytest.mark.integration

WHEELHOUSE = Path(os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels")
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"

MATRIX = """\
name: iblock
registry: ibtest.local/lock-{token}
defaults:
  os: debian12
  python: "3.11"
  flavors: {flavors}
  tf32: false
  base_image: bootstrap
  torchvision: false
  torchaudio: false
  transformer_engine: false
  pip_packages:
    base: [six]
    runtime: [numpy]
matrix:
  torch: ["2.13.0"]
  cuda: [cpu]
"""
INPUTS = ("--ca-cert", CA, "--wheelhouse", str(WHEELHOUSE), "--torch-index-url", "none")


@pytest.fixture()
def engine(cpu_build):
    """The engine, after the session's CPU build (conftest.cpu_build): these builds stand on the Debian 12 OS image
    that build bootstrapped. Asked first (any test order), a build here would bootstrap it instead, the session's build
    would find it by its label and bootstrap nothing, and the tests that read the session's bootstrap log
    (test_build_bootstrap.py, test_reproducible_images.py) would find none."""
    docker = pytest.importorskip("docker")
    if not list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")):
        pytest.skip(f"no torch 2.13.0 cp311 wheel in {WHEELHOUSE}")
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine: {exc}")
    made: list[str] = []
    yield client, made
    for repo in {ref.rsplit(":", 1)[0] for ref in made}:  # the tags and the plan's aliases (2.13-cpu-base, ...)
        for img in client.images.list(name=repo):
            for ref in img.tags:
                try:
                    client.api.remove_image(ref, force=True)
                except Exception:
                    pass
    client.close()


def _matrix(tmp_path: Path, flavors: str) -> Path:
    path = tmp_path / "iblock.yaml"
    path.write_text(MATRIX.format(token=secrets.token_hex(4), flavors=flavors))
    return path


def _lock(matrix: Path) -> dict:
    r = imagebuild("lock", "--matrix", str(matrix), *INPUTS, "--quiet")
    assert r.returncode == 0, r.stderr
    assert f"wrote {matrix.with_suffix('.lock')}" in r.stdout
    import yaml

    return yaml.safe_load(matrix.with_suffix(".lock").read_text())


def _build(matrix: Path, tmp_path: Path, *extra: str):
    """Each test's builds keep their record in the test's own folder: a record of another test's matrix (same file
    name) in the session's state dir is rightly warned about, and that warning is not what these tests read."""
    return imagebuild("build", "--matrix", str(matrix), *INPUTS, "--plain", "--log-dir", str(tmp_path / "logs"),
                      "--report-dir", str(tmp_path / "report"), *extra,
                      env={"IMAGEBUILD_STATE_DIR": str(tmp_path / "state")})


def _tags(tmp_path: Path) -> dict[str, str]:
    rows = json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]
    return {row["flavor"]: row for row in rows}


def _run(client, image: str, script: str) -> str:
    out = client.containers.run(image, ["bash", "-c", script], remove=True, network_mode="none", user="0")
    return out.decode()


@pytest.mark.full_tier
@pytest.mark.cold_build
def test_locked_cpu_runtime_installs_exactly_the_locked_files(engine, tmp_path):
    """A locked base + runtime built for real (~2 minutes: a runtime on another base, so torch is installed cold);
    make test keeps the tampered-hash build below: pip's --require-hashes on the lock, on a real build."""
    client, made = engine
    matrix = _matrix(tmp_path, "[base, runtime]")
    lock = _lock(matrix)
    images = lock["images"]
    base_id, runtime_id = "2.13.0-cpu-py3.11-debian12-base", "2.13.0-cpu-py3.11-debian12-runtime"
    assert [p["name"] for p in images[base_id]["pip"]] == ["six"]
    torch = next(p for p in images[runtime_id]["pip"] if p["name"] == "torch")
    assert torch["version"] == "2.13.0+cpu" and torch["file"].startswith("torch-2.13.0+cpu-cp311")

    r = _build(matrix, tmp_path, "--locked")
    rows = _tags(tmp_path) if (tmp_path / "report" / "build-report.json").exists() else {}
    made += [row["tag"] for row in rows.values()]
    assert r.returncode == 0, r.stderr[-3000:]
    assert {row["status"] for row in rows.values()} == {"built"}
    log = "".join(p.read_text() for p in (tmp_path / "logs").glob(f"*{runtime_id}*"))
    # the lock's files, tier by tier: each environment layer installs its part of the lock with --require-hashes
    assert "--lock /tmp/imagebuild-lock.txt" in log
    for tier in ("torch", "matrix-numpy"):
        assert f"--require-hashes -r /opt/stage/opt/venv/.imagebuild-layers/{tier}.txt" in log, tier

    # every locked pip file (base + runtime) is installed at its locked version, every apt package at its version
    listing = _run(client, rows["runtime"]["tag"], "/opt/venv/bin/python -c 'import importlib.metadata as m, json; "
                   "print(json.dumps({d.metadata[\"Name\"].lower().replace(\"_\", \"-\"): d.version "
                   "for d in m.distributions()}))'")
    installed = json.loads(listing)
    for image_id in (base_id, runtime_id):
        for pin in images[image_id]["pip"]:
            assert installed.get(pin["name"]) == pin["version"], pin
    apt = {**images[base_id]["apt"], **images[runtime_id]["apt"]}
    dpkg = _run(client, rows["runtime"]["tag"], "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(apt))
    assert dict(line.split(" ", 1) for line in dpkg.strip().splitlines()) == apt

    r = imagebuild("lock", "--check", "--matrix", str(matrix), *INPUTS)
    assert r.returncode == 0 and "up to date" in r.stdout


def test_a_tampered_hash_fails_the_build_naming_the_file_and_both_hashes(engine, tmp_path):
    client, made = engine
    matrix = _matrix(tmp_path, "[base]")
    lock = _lock(matrix)
    six = lock["images"]["2.13.0-cpu-py3.11-debian12-base"]["pip"][0]
    path = matrix.with_suffix(".lock")
    text = path.read_text()

    # a lock for another version than the matrix asks for: input error before anything is built
    matrix.write_text(matrix.read_text().replace("base: [six]", "base: [six==1.16.0]"))
    r = _build(matrix, tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[0].removeprefix("error: ").startswith(
        f"{path}: image 2.13.0-cpu-py3.11-debian12-base: six=={six['version']} does not match the "
        "matrix's six 1.16.0")
    assert not (tmp_path / "report").exists()
    matrix.write_text(matrix.read_text().replace("base: [six==1.16.0]", "base: [six]"))

    # a hash that the index's file does not have, in a lock that is otherwise whole (re-sealed: its content digest
    # fits, as after a maintainer's edit): pip's --require-hashes refuses the download (an unsealed edit is refused
    # before anything builds, see tests/unit/test_lock.py)
    from imagebuild.lock.model import content_digest, parse

    fake = "0" * 64
    edited = text.replace(six["sha256"], fake)
    resealed = parse(edited, str(path))
    old_seal = next(ln for ln in edited.splitlines() if ln.startswith("content_sha256: "))
    edited = edited.replace(old_seal, f'content_sha256: "{content_digest(resealed.matrix, resealed.images)}"')
    assert parse(edited, str(path)).seal == "ok"
    path.write_text(edited)
    r = _build(matrix, tmp_path)
    rows = _tags(tmp_path)
    made += [row["tag"] for row in rows.values()]
    assert r.returncode == 1
    error = rows["base"]["error"]
    assert rows["base"]["status"] == "failed"
    assert (f"{six['file']} (six=={six['version']}): the lock expects sha256 {fake}, the file has sha256 "
            f"{six['sha256']}") in error
    assert six["file"] in r.stdout + r.stderr and fake in r.stdout + r.stderr
    import docker

    with pytest.raises(docker.errors.ImageNotFound):  # nothing half-built is tagged
        client.api.inspect_image(rows["base"]["tag"])
