"""Verification bound to bytes, without an engine, registry or cosign (issue 39, items 1 and 5): an empty key is an
error on every command; a local squashfs is a file, never a Hub reference; slurm's .sqsh is the record's bytes; a
docker-archive holds exactly the inspected image ID; `run --print` names the verified REPO@DIGEST. Each both ways.
The same with the real engine, registry and cosign: tests/integration/test_trust_bytes.py."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from _archives import classic, oci, tar_of
from click.testing import CliRunner

from imagebuild.errors import UsageError
from imagebuild.export import export_archive
from imagebuild.export.archive import ArchiveError, copy_checked, repo_tag
from imagebuild.export.writer import ExportError
from imagebuild.oci.pyxis import container_image_flag, is_file_image
from imagebuild.sign.verify import Verified, VerifyError

PUB = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
HOSTS = Path(__file__).parent / "fixtures" / "hosts"
DIGEST = "sha256:" + "ab" * 32


def _invoke(command, args, env=None):
    return CliRunner(env=env).invoke(command, args, standalone_mode=False)


# -- item 5: an empty key is an error --------------------------------------------------------------------------------

def _commands():
    from imagebuild.commands.build import command as build
    from imagebuild.commands.export import command as export
    from imagebuild.commands.push import command as push
    from imagebuild.commands.run import command as run
    from imagebuild.commands.slurm import command as slurm
    from imagebuild.commands.verify import command as verify

    img = "127.0.0.1:5000/ml/x:1"
    return [(run, ["--verify-key", "", img], "--verify-key", "IMAGEBUILD_VERIFY_KEY"),
            (slurm, ["--verify-key", "", img], "--verify-key", "IMAGEBUILD_VERIFY_KEY"),
            (export, ["--verify-key", "", img, "-o", "x.sqsh"], "--verify-key", "IMAGEBUILD_VERIFY_KEY"),
            (verify, [img, "--key", ""], "--key", "IMAGEBUILD_VERIFY_KEY"),
            (push, ["--matrix", "x.yaml", "--sign-key", ""], "--sign-key", "IMAGEBUILD_SIGN_KEY"),
            (build, ["--matrix", "x.yaml", "--push", "--sign-key", ""], "--sign-key", "IMAGEBUILD_SIGN_KEY")]


@pytest.mark.parametrize("case", range(6))
def test_an_empty_key_option_or_variable_is_an_error(case, monkeypatch):
    command, args, flag, var = _commands()[case]
    for name in ("IMAGEBUILD_VERIFY_KEY", "IMAGEBUILD_SIGN_KEY"):
        monkeypatch.delenv(name, raising=False)
    r = _invoke(command, args)
    assert isinstance(r.exception, UsageError), r.output
    assert f"{flag} '': empty" in str(r.exception) and "KMS URI" in str(r.exception)
    for blank in ("", "  "):  # the variable behind it, set but empty (an unset CI secret)
        without = [a for i, a in enumerate(args) if a != flag and not (i and args[i - 1] == flag)]
        r = _invoke(command, without, env={var: blank})
        assert isinstance(r.exception, UsageError), r.output
        assert f"{var} is set but empty" in str(r.exception) and f"unset {var}" in str(r.exception)


def test_an_empty_key_is_one_error_line_through_the_cli():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "IMAGEBUILD_VERIFY_KEY": ""}
    res = subprocess.run([sys.executable, "-m", "imagebuild", "slurm", "--srun", "reg.example/ml/pt:1"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 2 and not res.stdout
    assert res.stderr.count("error:") == 1 and "IMAGEBUILD_VERIFY_KEY is set but empty" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_given_key_still_passes_the_option_check(tmp_path, monkeypatch):
    from imagebuild.commands.verify import command as verify

    monkeypatch.delenv("IMAGEBUILD_VERIFY_KEY", raising=False)
    (tmp_path / "cosign.pub").write_text(PUB)
    r = _invoke(verify, ["pytorch:1", "--key", str(tmp_path / "cosign.pub")])
    assert isinstance(r.exception, VerifyError) and "no registry reference to verify" in str(r.exception)


# -- item 5: a local squashfs is a file ----------------------------------------------------------------------------

def test_local_squashfs_files_are_files_and_printed_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pytorch").write_bytes(b"hsqs")
    for name in ("img.sqfs", "img.squashfs", "IMG.SQSH", "pytorch", "./x", "~/x.sqsh"):
        assert is_file_image(name), name
        flag = container_image_flag(name)
        assert flag.startswith("--container-image=/") and "#" not in flag, flag
    assert container_image_flag("img.sqfs") == f"--container-image={tmp_path}/img.sqfs"
    for ref in ("ubuntu:24.04", "reg.example:5000/ml/pt:1", "nvcr.io/nvidia/pytorch:24.10-py3", "pytorch:1"):
        assert not is_file_image(ref), ref
    assert container_image_flag("reg.example:5000/ml/pt:1") == "--container-image=reg.example:5000#ml/pt:1"


# -- item 1: slurm's .sqsh is the record's bytes ------------------------------------------------------------------

def _sqsh(tmp_path: Path, text: bytes) -> Path:
    src = tmp_path / f"src-{len(text)}"
    src.mkdir()
    (src / "f").write_bytes(text)
    out = tmp_path / "img.sqsh"
    out.unlink(missing_ok=True)
    subprocess.run(["mksquashfs", str(src), str(out), "-noappend", "-quiet"], check=True, capture_output=True)
    return out


def test_slurm_names_a_sqsh_only_when_it_is_the_recorded_export(tmp_path, monkeypatch):
    from imagebuild.commands import slurm
    from imagebuild.files import sha256_file

    if not Path("/usr/bin/unsquashfs").exists():
        pytest.skip("needs squashfs-tools")
    (tmp_path / "cosign.pub").write_text(PUB)
    sqsh = _sqsh(tmp_path, b"exported")
    verified = Verified("r/x:1", f"reg.example/ml/x@{DIGEST}", DIGEST, "ml/x")
    monkeypatch.setattr("imagebuild.sign.verify.check_image", lambda *a, **k: verified)
    chosen = slurm._Chosen(str(sqsh), "reg.example/ml/x:1", "sha256:" + "1" * 64, f"sha256:{sha256_file(sqsh)}",
                           {"digest": DIGEST, "image_id": "sha256:" + "1" * 64})
    said: list[str] = []
    assert slurm._verified(str(sqsh), chosen, str(tmp_path / "cosign.pub"), said.append) == str(sqsh)
    assert said == [f"verified: {sqsh} is the export of reg.example/ml/x@{DIGEST} (signature + SBOM + provenance)"]
    # replaced after the export (a whole squashfs, another content), sidecar absent: refused by the record's sha256
    _sqsh(tmp_path, b"replaced by someone")
    with pytest.raises(VerifyError, match="the file changed since the export") as exc:
        slurm._verified(str(sqsh), chosen, str(tmp_path / "cosign.pub"), said.append)
    assert str(sqsh) in str(exc.value) and len(said) == 1
    # a damaged file is refused by export --check's own check
    sqsh.write_bytes(sqsh.read_bytes()[:200])
    with pytest.raises(VerifyError, match="truncated"):
        slurm._verified(str(sqsh), chosen, str(tmp_path / "cosign.pub"), said.append)


# -- item 1: the docker-archive is the inspected image ID ---------------------------------------------------------

@pytest.mark.parametrize("layout", ["classic", "oci", "containerd"])
def test_archive_names_the_tag_and_holds_the_inspected_id(layout, tmp_path):
    image_id, files = classic() if layout == "classic" else oci(containerd=layout == "containerd")
    res = export_archive(iter([tar_of(files)]), {"Id": image_id}, tmp_path / "x.tar", name="reg.example/ml/x:1")
    assert res.image_id == image_id
    with tarfile.open(tmp_path / "x.tar") as t:
        import json

        assert json.load(t.extractfile("manifest.json"))[0]["RepoTags"] == ["reg.example/ml/x:1"]
        if layout != "classic":
            note = json.load(t.extractfile("index.json"))["manifests"][0]["annotations"]
            assert note == {"io.containerd.image.name": "reg.example/ml/x:1", "org.opencontainers.image.ref.name": "1"}


@pytest.mark.parametrize("layout", ["classic", "oci", "containerd"])
def test_an_archive_of_another_image_is_refused_and_nothing_is_written(layout, tmp_path):
    make = classic if layout == "classic" else (lambda label: oci(label, containerd=layout == "containerd"))
    verified_id, _ = make("verified")
    _, other = make("moved tag")  # what a name resolved again would have saved
    with pytest.raises(ExportError, match="not .* that was inspected and verified|nothing was written"):
        export_archive(iter([tar_of(other)]), {"Id": verified_id}, tmp_path / "x.tar", name="reg.example/ml/x:1")
    assert list(tmp_path.iterdir()) == []


def test_archive_members_that_lie_are_refused():
    image_id, files = oci()
    blob = next(n for n in files if n.startswith("blobs/") and files[n].startswith(b"\x00") is False
                and b"rootfs" in files[n])
    for name, data, words in ((blob, files[blob] + b" ", "not the digest it is named by"),
                              ("manifest.json", b"[]", "lists 0 images"),
                              ("manifest.json", b"{", "not JSON")):
        with pytest.raises(ArchiveError, match=words):
            copy_checked([tar_of({**files, name: data})], io.BytesIO(), image_id, None)
    cid, cfiles = classic()
    bad = {**cfiles, "abc/layer.tar": tar_of({"evil": b"1"})}  # a layer that is not the config's diff_id
    with pytest.raises(ArchiveError, match="diff_ids"):
        copy_checked([tar_of(bad)], io.BytesIO(), cid, None)
    with pytest.raises(ArchiveError, match="not a docker-archive"):
        copy_checked([b"not a tar" * 100], io.BytesIO(), cid, None)


def test_repo_tag_of_the_name_given():
    assert repo_tag("reg.example:5000/ml/x:1") == "reg.example:5000/ml/x:1"
    assert repo_tag("ubuntu") == "ubuntu:latest"
    assert repo_tag("sha256:" + "1" * 64) is None and repo_tag(f"reg.example/x@{DIGEST}") is None


# -- item 1: run --print names the verified digest ----------------------------------------------------------------

def test_run_print_names_the_verified_digest(tmp_path, monkeypatch):
    from imagebuild.commands import run
    from imagebuild.host import Topology
    from imagebuild.launch.image import ImageInfo

    (tmp_path / "cosign.pub").write_text(PUB)
    iid = "sha256:" + "2" * 64
    monkeypatch.setattr("imagebuild.engine.connect", lambda purpose: object())
    monkeypatch.setattr("imagebuild.engine.host_has_gpus", lambda client: False)
    monkeypatch.setattr(run, "_image", lambda *a: ImageInfo("reg.example/ml/x:1", iid))
    monkeypatch.setattr(run, "_host_facts", lambda root: (Topology(gpus=[], nodes={}), 8 << 30))
    monkeypatch.setattr("imagebuild.engine.store.as_store", lambda c: type("S", (), {"inspect": lambda s, i: None})())
    monkeypatch.setattr("imagebuild.sign.verify.check_image",
                        lambda *a, **k: Verified("reg.example/ml/x:1", f"reg.example/ml/x@{DIGEST}", DIGEST, "ml/x"))
    monkeypatch.delenv("IMAGEBUILD_VERIFY_KEY", raising=False)
    args = ["--gpus", "none", "--no-workspace", "--print"]
    r = _invoke(run.command, [*args, "--verify-key", str(tmp_path / "cosign.pub"), "reg.example/ml/x:1"])
    assert r.exception is None, r.output
    assert f" reg.example/ml/x@{DIGEST}" in r.stdout and "ml/x:1" not in r.stdout
    plain = _invoke(run.command, [*args, "reg.example/ml/x:1"])  # no key: the name the user gave, as before
    assert plain.exception is None and " reg.example/ml/x:1" in plain.stdout


# -- item 1: the catalog's pyxis link is the digest the row describes ---------------------------------------------

def test_catalog_pyxis_link_pins_the_digest_it_read():
    from imagebuild.catalog.collect import Entry
    from imagebuild.catalog.markdown import pinned

    ref = "127.0.0.1:5000/ml/pytorch-cpu:2.13-cpu-runtime"
    pushed = Entry(ref, "2.13-cpu-runtime", None, "runtime", {}, True, digest=DIGEST)
    assert pinned(pushed) == f"127.0.0.1:5000#ml/pytorch-cpu@{DIGEST}"
    absent = Entry(ref, "2.13-cpu-runtime", None, "runtime", {}, False)
    assert pinned(absent) == "127.0.0.1:5000#ml/pytorch-cpu:2.13-cpu-runtime"
