"""Verified means these bytes (issue 39, items 1 and 5), with the REAL engine, a real registry (htpasswd) and the
REAL cosign (the logic without them: tests/unit/test_verified_bytes.py): each path that verifies acts on the digest or image ID it verified, a file on the way is hashed, an
empty key is an error. Each case both ways: the attack refused, the honest case passing.

- `export --format docker-archive --verify-key`: the tag moved to another image during the cosign call: the archive
  still holds the verified image ID (saved by ID), named by the tag; an archive checked and renamed into place whole.
- `slurm`'s record check of a `.sqsh`: the file export wrote passes and the line names REPO@DIGEST; the same name
  replaced by another whole squashfs (its sidecar with it) is refused.
- `run --print --verify-key` prints REPO@DIGEST; a local tag moved to an unsigned image is refused.
- an empty `--verify-key`, `IMAGEBUILD_VERIFY_KEY=`, `verify --key ""`, `push --sign-key ""`: one error line each.
- `slurm NAME.sqfs`: a local file, printed absolute, never a Docker Hub reference.

Images are tiny FROM-scratch ones; each cosign call takes about a second. Own names, own IMAGEBUILD_STATE_DIR.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.push import Pusher
from imagebuild.sign import SigningKey, cosign_registry, sign_digest
from imagebuild.sign.verify import VerifyError

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import PASSWORD, USER, Images, auth, cosign_key_pair, image_plan, imagebuild, ns  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
KEY_PASSWORD = "kb-" + secrets.token_hex(10)
PROVENANCE = {"buildDefinition": {"buildType": "https://example.invalid/test", "externalParameters": {}},
              "runDetails": {"builder": {"id": "https://example.invalid/test"}}}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    state = tmp_path_factory.mktemp("trust-bytes-state")
    return {"IMAGEBUILD_REGISTRY_USER": USER, "IMAGEBUILD_REGISTRY_PASSWORD": PASSWORD,
            "IMAGEBUILD_STATE_DIR": str(state)}


@pytest.fixture(scope="module")
def signed(cosign, docker_client, registry, tmp_path_factory):
    """One tiny image pushed and signed (signature + SBOM + provenance) with a fresh key, and an unsigned one."""
    folder = tmp_path_factory.mktemp("trust-bytes-keys")
    cosign_key_pair(cosign, folder / "good", KEY_PASSWORD)
    os.chmod(folder / "good.key", 0o600)
    key = SigningKey.from_option(str(folder / "good.key"), KEY_PASSWORD)
    images = Images(docker_client)
    reg = registry["REGISTRY"]
    plan = image_plan(f"{reg}/{ns()}", "base", None)

    def sign_pushed(image, digest_ref):
        from imagebuild.oci import RegistryClient

        client = RegistryClient(auth(reg), scheme="http")
        return sign_digest(digest_ref, key, cosign_registry(client), sbom={"bomFormat": "CycloneDX"},
                           provenance=PROVENANCE).as_record()

    good_id = images.build({"good.bin": os.urandom(4096)}, None, plan.tag)
    pushed = Pusher(docker_client, auth(reg), sign_pushed=sign_pushed).push_image(plan)
    assert pushed["status"] == "pushed", pushed.get("error")
    other_id = images.build({"other.bin": os.urandom(4096)}, None, f"{reg}/{ns()}/unsigned:1")
    repo = plan.tag.rsplit(":", 1)[0]
    yield {"tag": plan.tag, "id": good_id, "other": other_id, "digest": pushed["digest"],
           "digest_ref": f"{repo}@{pushed['digest']}", "pub": str(folder / "good.pub"), "images": images,
           "push": {"digest": pushed["digest"], "image_id": good_id}}
    images.cleanup()


def _one_error_line(res: subprocess.CompletedProcess[str], *words: str) -> str:
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def _archive_config_digest(tar: Path) -> tuple[str, list[str]]:
    import hashlib

    with tarfile.open(tar) as t:
        entry = json.load(t.extractfile("manifest.json"))[0]  # type: ignore[arg-type]
        config = t.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
    return f"sha256:{hashlib.sha256(config).hexdigest()}", entry["RepoTags"]


def test_docker_archive_holds_the_verified_id_when_the_tag_moves_during_the_check(signed, docker_client, env,
                                                                                  tmp_path, monkeypatch):
    from imagebuild.commands.export import command as export
    from imagebuild.sign import verify

    tag, good, other = signed["tag"], signed["id"], signed["other"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    real_check = verify.check_image

    def check_then_move(*args, **kwargs):  # the attack: the tag moves to another image while cosign runs
        verified = real_check(*args, **kwargs)
        signed["images"].tag(other, tag)
        return verified

    monkeypatch.setattr(verify, "check_image", check_then_move)
    out = tmp_path / "image.tar"
    try:
        r = CliRunner().invoke(export, [tag, "--format", "docker-archive", "--verify-key", signed["pub"], "-o",
                                        str(out)], standalone_mode=False)
        assert r.exception is None, (r.output, r.exception)
        assert docker_client.api.inspect_image(tag)["Id"] == other  # the tag did move
        assert _archive_config_digest(out) == (good, [tag])  # the verified image, under the tag
        assert f"verified: {signed['digest_ref']}" in r.output
        assert sorted(p.name for p in tmp_path.iterdir()) == ["image.tar", "image.tar.sha256"]  # nothing partial
    finally:
        signed["images"].tag(good, tag)
    # the honest case through the CLI: the same archive, loadable by docker, naming the tag
    again = imagebuild("export", tag, "--format", "docker-archive", "--verify-key", signed["pub"], "-o",
                       str(tmp_path / "again.tar"), env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert _archive_config_digest(tmp_path / "again.tar") == (good, [tag])
    docker_client.api.remove_image(tag, force=True)
    with open(tmp_path / "again.tar", "rb") as f:
        docker_client.api.load_image(f.read())
    assert docker_client.api.inspect_image(tag)["Id"] == good


def test_slurm_names_a_sqsh_only_when_its_bytes_are_the_export(signed, env, tmp_path, monkeypatch):
    from imagebuild.commands import slurm

    tag = signed["tag"]
    sqsh = tmp_path / "image.sqsh"
    made = imagebuild("export", tag, "--verify-key", signed["pub"], "-o", str(sqsh), env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    sha = "sha256:" + (tmp_path / "image.sqsh.sha256").read_text().split()[0]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    chosen = slurm._Chosen(str(sqsh), tag, signed["id"], sha, signed["push"])
    said: list[str] = []
    assert slurm._verified(str(sqsh), chosen, signed["pub"], said.append) == str(sqsh)
    assert said == [f"verified: {sqsh} is the export of {signed['digest_ref']} (signature + SBOM + provenance)"]
    # the attack: another image's whole export, its sidecar with it, put under the same name after the export
    swap = imagebuild("export", signed["other"], "-o", str(sqsh), "--force", env=env, timeout=300)
    assert swap.returncode == 0, swap.stderr
    check = imagebuild("export", "--check", str(sqsh), env=env, timeout=120)
    assert check.returncode == 0  # whole, and its sidecar agrees: only the record tells
    with pytest.raises(VerifyError, match="the file changed since the export"):
        slurm._verified(str(sqsh), chosen, signed["pub"], said.append)
    assert len(said) == 1


def test_run_print_names_the_verified_digest_and_refuses_a_moved_local_tag(signed, env):
    tag = signed["tag"]
    args = ["run", "--gpus", "none", "--no-workspace", "--print", "--verify-key", signed["pub"]]
    ok = imagebuild(*args, tag, env=env, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert f" {signed['digest_ref']}" in ok.stdout and f" {tag}" not in ok.stdout
    signed["images"].tag(signed["other"], tag)  # the local tag moved to an unsigned image
    try:
        moved = imagebuild(*args, tag, env=env, timeout=300)
    finally:
        signed["images"].tag(signed["id"], tag)
    assert moved.returncode == 1 and not moved.stdout
    _one_error_line(moved, tag, "is not the signed")


def test_an_empty_key_is_one_error_line_and_does_nothing(signed, env, tmp_path):
    tag = signed["tag"]
    out = tmp_path / "x.sqsh"
    for args, extra, words in (
            (["run", "--gpus", "none", "--print", "--verify-key", "", tag], {}, ["--verify-key '': empty"]),
            (["export", tag, "-o", str(out)], {"IMAGEBUILD_VERIFY_KEY": ""}, ["IMAGEBUILD_VERIFY_KEY is set but"]),
            (["slurm", "--srun", tag], {"IMAGEBUILD_VERIFY_KEY": " "}, ["IMAGEBUILD_VERIFY_KEY is set but"]),
            (["verify", tag, "--key", ""], {}, ["--key '': empty"]),
            (["push", "--matrix", "images/cpu.yaml", "--sign-key", ""], {}, ["--sign-key '': empty"])):
        res = imagebuild(*args, env={**env, **extra}, timeout=120)
        assert res.returncode == 2 and not res.stdout, (args, res.stderr)
        _one_error_line(res, *words)
    assert not out.exists()


def test_a_local_sqfs_is_a_file_never_a_hub_image(signed, env, tmp_path):
    (tmp_path / "pytorch.sqfs").write_bytes(b"hsqs")
    res = imagebuild("slurm", "--srun", "--no-workspace", "pytorch.sqfs", env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"--container-image={tmp_path}/pytorch.sqfs" in res.stdout and "#" not in res.stdout.split("srun")[1][:80]
