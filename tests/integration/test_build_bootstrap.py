"""The bootstrap base source for real: mmdebstrap of Debian 12 from the mirror, imported through the SDK, reused.

`make test` reads the Debian 12 bootstrap the session's CPU build made (conftest.cpu_build: the one Debian bootstrap
of the classic engine) and bootstraps Ubuntu 24.04 once; the full tier (`make test-all`) bootstraps Debian 12 again
under a repository of its own (~1 min, ~40 MB from the mirror) and Ubuntu 24.04 twice (bit-reproducible).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path

import pytest

from imagebuild.builder import bootstrap
from imagebuild.compat import load as load_tables
from imagebuild.models import BaseSource, OSInfo, ResolvedVariant, Versions

pytestmark = pytest.mark.integration

DEBIAN12 = OSInfo(id="debian12", family="debian", version="12", codename="bookworm", system_python="3.11",
                  installable_pythons=("3.11",), mirror="http://deb.debian.org/debian", glibc="2.36",
                  archive_keys=load_tables().os["debian12"].archive_keys, keyring="debian-archive.asc")


def test_the_sessions_debian12_bootstrap_is_labelled_and_reused(cpu_build, client, tmp_path):
    """The OS image the session's CPU build bootstrapped (its log in the build's log folder): labelled with its spec's
    hash and suite, Python 3.11 + tini + bookworm inside, no man pages; asked again, it is reused by tag and label."""
    assert cpu_build.result.returncode == 0, cpu_build.result.stderr[-3000:]
    [base] = [img for img in cpu_build.plan.images if img.flavor == "base"]
    spec = bootstrap.spec_for(base.variant)
    logs = sorted((cpu_build.tmp / "logs").rglob(f"bootstrap-debian12-{spec.hash()[:12]}.log"))
    assert logs, f"the session's build left no bootstrap log in {cpu_build.tmp / 'logs'}: it did not bootstrap"
    assert "mmdebstrap" in logs[0].read_text() or "debootstrap" in logs[0].read_text()
    info = client.api.inspect_image(spec.tag)
    labels = info["Config"]["Labels"]
    assert labels[bootstrap.HASH_LABEL] == spec.hash()
    assert labels["io.imagebuild.bootstrap-suite"] == "bookworm"
    out = client.containers.run(
        spec.tag, ["sh", "-c", "python3 -c 'import sys, venv, ssl; print(sys.version_info[:2])'; tini --version;"
                               " . /etc/os-release; echo $VERSION_CODENAME; ls /usr/share/man | wc -l"],
        network_mode="none", remove=True).decode().split("\n")
    assert out[0] == "(3, 11)" and out[1].startswith("tini version") and out[2] == "bookworm"
    assert out[3] == "0"  # man pages filtered out
    again = bootstrap.ensure_bootstrap(client, spec, log_dir=tmp_path)
    assert again.reused and again.image_id == info["Id"]


@pytest.mark.full_tier
@pytest.mark.bootstrap
def test_bootstrap_debian12_import_label_reuse(client, tmp_path):
    var = ResolvedVariant(key="k", name="n", registry="", versions=Versions("0", "cpu", "3.11", "debian12"),
                          cuda_tag="cpu", os=DEBIAN12, base=BaseSource(kind="bootstrap"), torch_index_url=None,
                          flavors=("base",), tf32=False, gpu_archs=(), arch_list=(), min_driver=None)
    spec = dataclasses.replace(bootstrap.spec_for(var), repository=f"ibdev-build-{uuid.uuid4().hex[:8]}-os")
    t0 = time.monotonic()
    res = bootstrap.ensure_bootstrap(client, spec, force=True, log_dir=tmp_path)
    took = time.monotonic() - t0
    try:
        assert not res.reused and res.tool in ("mmdebstrap", "debootstrap")
        info = client.api.inspect_image(spec.tag)
        assert info["Id"] == res.image_id
        labels = info["Config"]["Labels"]
        assert labels[bootstrap.HASH_LABEL] == spec.hash()
        assert labels["io.imagebuild.bootstrap-suite"] == "bookworm"
        out = client.containers.run(
            spec.tag, ["sh", "-c", "python3 -c 'import sys, venv, ssl; print(sys.version_info[:2])'; tini --version;"
                                   " . /etc/os-release; echo $VERSION_CODENAME; ls /usr/share/man | wc -l"],
            network_mode="none", remove=True).decode().split("\n")
        assert out[0] == "(3, 11)" and out[1].startswith("tini version") and out[2] == "bookworm"
        assert out[3] == "0"  # man pages filtered out
        size = info["Size"]
        again = bootstrap.ensure_bootstrap(client, spec, log_dir=tmp_path)
        assert again.reused and again.image_id == res.image_id
        print(f"\nbootstrap debian12 ({res.tool}): {took:.0f}s, {size / 1e6:.0f} MB")
    finally:
        client.api.remove_image(spec.tag, force=True)


UBUNTU_ARCHIVE = "http://archive.ubuntu.com/ubuntu"


def _ubuntu_archive_answers() -> str | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{UBUNTU_ARCHIVE}/dists/noble/InRelease", timeout=20) as resp:
            resp.read(64)
        return None
    except Exception as exc:
        return f"the Ubuntu archive does not answer ({UBUNTU_ARCHIVE}: {exc})"


@pytest.mark.bootstrap
def test_bootstrap_ubuntu2404_on_this_host_verified(client, tmp_path):
    """An Ubuntu 24.04 base from the Ubuntu archive (updates + security pockets) on a Debian host: apt trusts only the
    pinned archive keys (one bootstrap; the full tier's test below makes two and compares them)."""
    _ubuntu_bootstraps(client, tmp_path, times=1)


@pytest.mark.full_tier
@pytest.mark.bootstrap
def test_bootstrap_ubuntu2404_on_this_host_verified_and_bit_reproducible(client, tmp_path):
    """As above, twice: two bootstraps of the same mirror state give one layer digest."""
    _ubuntu_bootstraps(client, tmp_path, times=2)


def _ubuntu_bootstraps(client, tmp_path: Path, times: int) -> None:
    reason = _ubuntu_archive_answers()
    if reason:
        pytest.skip(reason)
    from imagebuild.compat import load

    ubuntu = load().os["ubuntu24.04"]
    var = ResolvedVariant(key="k", name="n", registry="", versions=Versions("0", "cpu", "3.12", "ubuntu24.04"),
                          cuda_tag="cpu", os=ubuntu, base=BaseSource(kind="bootstrap"), torch_index_url=None,
                          flavors=("base",), tf32=False, gpu_archs=(), arch_list=(), min_driver=None)
    spec = dataclasses.replace(bootstrap.spec_for(var), repository=f"ibdev-build-{uuid.uuid4().hex[:8]}-os")
    assert any("noble-security" in s for s in spec.sources()) and any("noble-updates" in s for s in spec.sources())
    epoch = bootstrap.mirror_epoch(spec)
    assert epoch and int(epoch) > 1_700_000_000
    layers, ids = [], []
    try:
        for _ in range(times):
            res = bootstrap.ensure_bootstrap(client, spec, force=True, log_dir=tmp_path)
            info = client.api.inspect_image(res.image_id)
            layers.append(info["RootFS"]["Layers"])
            ids.append(res.image_id)
            log = Path(res.log_path).read_text()
            assert "--keyring=" in log and "ubuntu24.04-archive.gpg" in log
        assert len(layers[0]) == 1 and all(more == layers[0] for more in layers[1:]), layers  # one digest
        out = client.containers.run(
            spec.tag, ["sh", "-c", ". /etc/os-release; echo $ID $VERSION_ID $VERSION_CODENAME; "
                                   "python3 -c 'import sys, venv, ssl; print(sys.version_info[:2])'; tini --version; "
                                   "apt-get --version | head -1"],
            network_mode="none", remove=True).decode().split("\n")
        assert out[0] == "ubuntu 24.04 noble" and out[1] == "(3, 12)" and out[2].startswith("tini version")
        assert out[3].startswith("apt ")  # Ubuntu's minbase lacks apt; every flavor installs with apt-get
        print(f"\nbootstrap ubuntu24.04: layer {layers[0][0][:19]} {times} time(s), epoch {epoch}")
    finally:
        for image_id in dict.fromkeys(ids):
            try:
                client.api.remove_image(image_id, force=True)
            except Exception:
                pass


def test_wrong_pinned_key_fails_before_apt(tmp_path):
    """A fingerprint that is not in the packaged key file stops the bootstrap with the fingerprint named."""
    from imagebuild.compat import load

    ubuntu = load().os["ubuntu24.04"]
    spec = bootstrap.BootstrapSpec("ubuntu24.04", "ubuntu", "noble", UBUNTU_ARCHIVE, ("main",), ("python3",),
                                   archive_keys=("0" * 40,), keyring=ubuntu.keyring)
    with pytest.raises(bootstrap.BootstrapError, match="lacks the pinned archive key"):
        bootstrap.pinned_keyring(spec, tmp_path)
    with pytest.raises(bootstrap.BootstrapError, match="no archive key fingerprints"):
        bootstrap.pinned_keyring(dataclasses.replace(spec, archive_keys=()), tmp_path)
