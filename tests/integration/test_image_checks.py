"""The image checks (pip check, ldd, one copy, arbitrary UID, hygiene, locale, CA bundle) against deliberately broken
images.

Each broken image is a tiny image FROM the real CPU runtime (or dev) image of images/cpu.yaml (conftest.cpu_build,
or IMAGEBUILD_SMOKE_IMAGE / IMAGEBUILD_SMOKE_DEV_IMAGE), derived the way a user would (FROM + USER root + RUN), that
breaks exactly one thing. `imagebuild test --image REF` must fail that check, and only
that one of these checks, while the unbroken image passes all of them. `--flavor base` keeps each run to the
sections these checks live in (no torch.compile, AMP, distributed): they are base-level checks of every flavor.
The derived images are removed at the end.

`make test` breaks them in two images (GROUPS: what the image holds; who may read and write what): each breakage
fails its own check with its own reason, and every check of the other group passes. One image per breakage, each
failing exactly its check, is the full tier's (14 runs of the suite: ~4 minutes of a CPU-bound `make test`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import cpu_image, imagebuild  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("docker_cli"), pytest.mark.cpu_images("cpu_build")]

# the checks under test, named as the probe and its table name them (section.check)
# (libraries/one_copy[*] skip on the CPU images, which carry no CUDA library: only its broken image names it)
CHECKS = ("pip.check", "ldd.resolve", "ldd.machine", "locale.utf8", "locale.python",
          "hygiene.ssh_host_keys", "hygiene.tmp", "hygiene.pip_cache",
          "hygiene.apt_cache", "uid.home_writable",
          "uid.tmp_writable", "uid.torch_import", "system.ca_bundle")

SITE = """$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"""

# a torchaudio-style extension (no RPATH/RUNPATH, NEEDs a library its parent package preloads): works, must pass ldd
PARENT_LOADED = """\
USER root
RUN set -eux; s="{site}"; mkdir -p "$s/ibparent/lib" "$s/ibchild" /tmp/ibsrc; \\
    echo 'int ibparent(void){{return 41;}}' > /tmp/ibsrc/p.c; \\
    echo 'int ibparent(void); int ibchild(void){{return ibparent() + 1;}}' > /tmp/ibsrc/c.c; \\
    gcc -shared -fPIC -Wl,-soname,libibparent.so -o "$s/ibparent/lib/libibparent.so" /tmp/ibsrc/p.c; \\
    gcc -shared -fPIC -o "$s/ibchild/_ext.so" /tmp/ibsrc/c.c -L"$s/ibparent/lib" -libparent; \\
    printf 'import ctypes, os\\nctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libibparent.so"), '\\
'mode=ctypes.RTLD_GLOBAL)\\n' > "$s/ibparent/__init__.py"; \\
    echo 'import ibparent' > "$s/ibchild/__init__.py"; rm -rf /tmp/ibsrc
USER 1000
"""

# kind -> (parent flavor, Dockerfile lines after FROM, the check that must fail, text its reason must contain)
BROKEN = {
    "ldd": ("runtime", """\
USER 0
RUN set -eux; d="{site}/ibbroken_native"; mkdir -p "$d" /tmp/ibdep; \\
    echo 'int ibdep(void){{return 1;}}' > /tmp/ibdep/dep.c; \\
    echo 'int ibdep(void); int ibf(void){{return ibdep();}}' > /tmp/ibdep/lib.c; \\
    gcc -shared -fPIC -o /tmp/ibdep/libibdep.so /tmp/ibdep/dep.c; \\
    gcc -shared -fPIC -o "$d/libibbroken.so" /tmp/ibdep/lib.c -L/tmp/ibdep -libdep; \\
    rm -rf /tmp/ibdep
USER 1000
""", "ldd.resolve", "ibbroken_native/libibbroken.so: libibdep.so not found"),
    # an extension module of another machine (an aarch64 wheel's .so in this amd64 image, x86_64 on an arm64 host):
    # Python's own _ctypes with the ELF header's machine changed
    "machine": ("runtime", """\
USER 0
RUN set -eux; d="{site}/ibwrongarch"; mkdir -p "$d"; /opt/venv/bin/python -c "import _ctypes, sys; \
b = bytearray(open(_ctypes.__file__, 'rb').read()); here = int.from_bytes(b[18:20], 'little'); \
b[18:20] = (183 if here != 183 else 62).to_bytes(2, 'little'); open(sys.argv[1], 'wb').write(b)" "$d/_C.so"
USER 1000
""", "ldd.machine", "are built for another machine than x86_64: ibwrongarch/_C.so (aarch64)"),
    "pip": ("runtime", """\
USER 0
RUN set -eux; d="{site}/ibbroken-1.0.dist-info"; mkdir "$d"; \\
    printf 'Metadata-Version: 2.1\\nName: ibbroken\\nVersion: 1.0\\nRequires-Dist: numpy<1\\n' > "$d/METADATA"; \\
    printf 'pip\\n' > "$d/INSTALLER"; : > "$d/RECORD"
USER 1000
""", "pip.check", "ibbroken 1.0 requires numpy<1, found numpy"),
    "tmp": ("runtime", """\
RUN echo leftover > /tmp/x
""", "hygiene.tmp", "files left in /tmp or /var/tmp in the image: /tmp/x"),
    "sshkey": ("dev", """\
USER root
RUN ssh-keygen -A
""", "hygiene.ssh_host_keys", "/etc/ssh/ssh_host_ed25519_key"),
    "pipcache": ("runtime", """\
RUN mkdir -p /home/ml/.cache/pip/http && echo x > /home/ml/.cache/pip/http/entry
""", "hygiene.pip_cache", "pip/user caches in the image: /home/ml/.cache/pip"),
    "aptcache": ("runtime", """\
USER root
RUN touch /var/cache/apt/archives/ib-leftover.deb /var/cache/apt/pkgcache.bin
USER 1000
""", "hygiene.apt_cache", "apt caches in the image: /var/cache/apt/archives/ib-leftover.deb"),
    "libcopy": ("runtime", """\
USER root
RUN set -eux; s="{site}"; mkdir -p "$s/ibcuda/lib" "$s/ibvendored.libs" "$s/ibcuda-1.0.dist-info"; \\
    : > "$s/ibcuda/lib/libcudart.so.12"; : > "$s/ibvendored.libs/libcudart.41118559.so.12"; \\
    printf 'Metadata-Version: 2.1\\nName: ibcuda\\nVersion: 1.0\\n' > "$s/ibcuda-1.0.dist-info/METADATA"; \\
    printf 'ibcuda/lib/libcudart.so.12,,\\n' > "$s/ibcuda-1.0.dist-info/RECORD"
USER 1000
""", "libraries/one_copy[cudart]", "ibcuda/lib/libcudart.so.12 from ibcuda, "),
    "locale": ("runtime", """\
ENV LANG=C LC_ALL=
""", "locale.utf8", "LANG=C is not a UTF-8 locale"),
    "cabundle": ("runtime", """\
ENV SSL_CERT_FILE=/build-host/certs/corporate-ca.pem
""", "system.ca_bundle", "SSL_CERT_FILE=/build-host/certs/corporate-ca.pem (no such file)"),
    "tmpgroup": ("runtime", """\
USER 0
RUN chgrp 1000 /tmp && chmod 1770 /tmp
USER 1000
""", "uid.tmp_writable", "temp dir /tmp not writable by uid 12345 gid 0"),
    "torchperm": ("runtime", """\
USER 0
RUN s="{site}"; chown 1000:1000 "$s/torch" && chmod 700 "$s/torch"
USER 1000
""", "uid.torch_import", "as uid 12345"),
    "home": ("runtime", """\
USER 0
RUN chgrp -R ml /home/ml && chmod -R g-w /home/ml
USER 1000
""", "uid.home_writable", "HOME /home/ml not writable by uid 12345 gid 0"),
}


@pytest.fixture(scope="module")
def runtime_image(request):
    return cpu_image(request, "runtime")


@pytest.fixture(scope="module")
def broken(derive, request):
    """kind -> tag of the derived image (BROKEN, or "parent-loaded": PARENT_LOADED on the runtime), built lazily by
    the run's image provider (conftest.derive) and removed at the end of the run."""

    def get(kind: str) -> str:
        flavor, lines = ("runtime", PARENT_LOADED) if kind == "parent-loaded" else BROKEN[kind][:2]
        return derive(f"broken-{kind}", cpu_image(request, flavor), lines.format(site=SITE))

    return get


def _test(ref: str, tmp_path: Path) -> tuple[int, dict[str, dict]]:
    out = imagebuild("test", "--image", ref, "--flavor", "base", "--json", "--timeout", "600",
                     "--results", str(tmp_path / "results"), timeout=900)
    assert out.stdout.strip().startswith("["), out.stdout[-2000:] + out.stderr[-2000:]
    rows = json.loads(out.stdout)
    assert len(rows) == 1
    return out.returncode, {c["name"]: c for c in rows[0]["checks"]}


def _no_container_left(image: str) -> None:
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"ancestor={image}"], capture_output=True,
                          text=True).stdout.split()
    assert left == [], f"containers left behind (main or arbitrary-UID): {left}"


def test_unbroken_runtime_passes_every_image_check(runtime_image, tmp_path):
    t0 = time.time()
    rc, checks = _test(runtime_image, tmp_path)
    print(f"\n{runtime_image}: --flavor base run in {time.time() - t0:.1f}s")
    bad = {n: checks.get(n, {}).get("reason", "missing") for n in CHECKS
           if checks.get(n, {}).get("status") != "passed"}
    assert not bad, bad
    assert rc == 0, {n: c["reason"] for n, c in checks.items() if c["status"] == "failed"}
    assert "HOME /home/ml writable by uid 12345 gid 0 (no passwd entry)" in \
        checks["uid.home_writable"]["reason"]


# make test's two images, each all the breakages of one group at once (sshkey: a host key file in the runtime image,
# where the full tier's own image runs ssh-keygen in the dev image). The access image refuses the arbitrary UID both
# /tmp and HOME: the suite's probe then runs from /dev/shm, and each uid check reports its own finding.
GROUPS = {
    "content": ("ldd", "machine", "pip", "tmp", "sshkey", "pipcache", "aptcache", "libcopy"),
    "access": ("locale", "cabundle", "tmpgroup", "torchperm", "home"),
}
FAKE_HOST_KEY = """\
USER 0
RUN mkdir -p /etc/ssh && echo 'not a key' > /etc/ssh/ssh_host_ed25519_key
USER 1000
"""


def test_the_groups_cover_every_breakage_once():
    assert sorted(k for kinds in GROUPS.values() for k in kinds) == sorted(BROKEN)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_each_breakage_of_a_group_fails_its_own_check(derive, request, tmp_path, group):
    kinds = GROUPS[group]
    lines = "".join(FAKE_HOST_KEY if kind == "sshkey" else BROKEN[kind][1] for kind in kinds) + "USER 1000\n"
    image = derive(f"broken-{group}", cpu_image(request, "runtime"), lines.format(site=SITE))
    rc, checks = _test(image, tmp_path)
    assert rc == 1
    mine = {BROKEN[kind][2]: BROKEN[kind][3] for kind in kinds}
    for check, text in mine.items():
        assert checks[check]["status"] == "failed", (check, checks[check])
        assert text in checks[check]["reason"], (check, checks[check]["reason"])
    others = {n: checks[n]["reason"] for n in CHECKS if n not in mine and checks[n]["status"] != "passed"}
    assert not others, others
    _no_container_left(image)


@pytest.mark.full_tier  # make test: test_each_breakage_of_a_group_fails_its_own_check (two images, not 14)
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_image_fails_exactly_its_check(broken, tmp_path, kind):
    _, _, check, text = BROKEN[kind]
    rc, checks = _test(broken(kind), tmp_path)
    assert rc == 1
    assert checks[check]["status"] == "failed", checks[check]
    assert text in checks[check]["reason"], checks[check]["reason"]
    others = {n: checks[n]["status"] for n in CHECKS if n != check and checks[n]["status"] != "passed"}
    assert not others, {n: checks[n]["reason"] for n in others}
    _no_container_left(broken(kind))


def test_extension_loading_after_its_parent_passes(broken, tmp_path):
    """A working image whose extension ldd alone cannot resolve (torchaudio's case): the real load after its
    package's imports finds the library, so no image check fails."""
    rc, checks = _test(broken("parent-loaded"), tmp_path)
    bad = {n: checks[n]["reason"] for n in CHECKS if checks[n]["status"] != "passed"}
    assert not bad and rc == 0, bad
    rescued = {(r["library"], r["soname"]): r["via"] for r in checks["ldd.resolve"]["figures"]
               ["rescued"]}
    assert rescued[("ibchild/_ext.so", "libibparent.so")] == "loads after import ibchild", rescued
