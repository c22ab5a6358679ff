"""The bootstrap base source for real: mmdebstrap of Debian 12 from the mirror, imported through the SDK, reused.

Slow (~1 min, downloads ~40 MB from the Debian mirror). Uses its own repository name and removes its image.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest

from imagebuild.builder import bootstrap
from imagebuild.engine import connect
from imagebuild.errors import EngineUnavailable
from imagebuild.models import BaseSource, OSInfo, ResolvedVariant, Versions

pytestmark = pytest.mark.integration

DEBIAN12 = OSInfo(id="debian12", family="debian", version="12", codename="bookworm", system_python="3.11",
                  installable_pythons=("3.11",), mirror="http://deb.debian.org/debian", glibc="2.36")


@pytest.fixture(scope="module")
def client():
    try:
        c = connect(timeout=600)
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    yield c
    c.close()


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
