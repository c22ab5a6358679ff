"""Helpers shared by the integration tests (no tests, no fixtures here: fixtures live in conftest.py).

Imported as `from _helpers import ...` (tests/integration is on sys.path: conftest.py and the test modules put it
there); test modules never import conftest.py or each other.
"""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys
import tarfile
from pathlib import Path

from imagebuild.models import BaseSource, ImagePlan, OSInfo, ResolvedVariant, Versions
from imagebuild.oci import RegistryAuth
from imagebuild.plan.tags import references
from imagebuild.render import RenderedImage

ROOT = Path(__file__).resolve().parents[2]
# the modern engine (dockerd 26.1 + buildx) scripts/run-tests.sh starts for the BuildKit backend's tests
BK_HOST = os.environ.get("IMAGEBUILD_BUILDKIT_HOST", "")
BK_CONFIG = os.environ.get("IMAGEBUILD_BUILDKIT_DOCKER_CONFIG") or str(ROOT / ".tools" / "docker-config")
# the push tests' registry user (the `registry` fixture in conftest.py starts a registry with it)
USER, PASSWORD = "ibuser", "ib-" + secrets.token_hex(8)
MTIME = 1_700_000_000


def imagebuild(*args: str, stdin: str | None = None, timeout: int = 1800, env: dict | None = None,
               cwd: Path | None = None):
    """Run the real CLI in a subprocess (as a user would), from the repository root unless `cwd` is given."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], input=stdin, capture_output=True, text=True,
                          cwd=cwd or ROOT, env=full_env, timeout=timeout)


def bk_env(state: Path) -> dict[str, str]:
    """The environment of a CLI run against the modern engine, its records in `state`."""
    return {"DOCKER_HOST": BK_HOST, "DOCKER_CONFIG": BK_CONFIG, "IMAGEBUILD_STATE_DIR": str(state)}


def bk_args(cpu_build, tmp: Path, flavors: tuple[str, ...] = ()) -> list[str]:
    """conftest.cpu_build's build arguments for the BuildKit backend, logs and report under `tmp`; `flavors`: only
    those images of the matrix (`--only`, each), else all of them."""
    args = cpu_build.build_args()
    for flavor in flavors:
        args += ["--only", flavor]
    args[args.index("--log-dir") + 1] = str(tmp / "logs")
    args[args.index("--report-dir") + 1] = str(tmp / "report")
    # --force: on a warm engine (IMAGEBUILD_BUILDKIT_HOST set by hand, or benches run before) the same inputs hash is
    # rightly "up to date" and nothing here would prove a BuildKit build
    return [*args, "--backend", "buildkit", "--test", "--no-registry-cache", "--force"]


def start_registry(user: str | None, password: str = "", *extra: str) -> dict[str, str]:
    """scripts/registry.sh with htpasswd auth (password via the environment, never argv), or without auth when
    `user` is None; its REGISTRY=… lines."""
    auth = ["--user", user] if user is not None else []
    out = subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), *auth, "--quiet", *extra],
                         env={**os.environ, "REGISTRY_PASSWORD": password}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = dict(line.split("=", 1) for line in out.stdout.split() if "=" in line)
    if password:
        assert password not in (Path(info["REGISTRY_DIR"]) / "config.yml").read_text()
    return info


def stop_registry(info: dict[str, str]) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--stop", "--dir", info["REGISTRY_DIR"]],
                   timeout=30, check=False)


# -- tiny image chains for the push tests ------------------------------------------------------------------------

class Images:
    """Builds tiny image chains and removes every tag it made (plus pushed aliases and pulled copies)."""

    def __init__(self, client):
        self.client = client
        self.refs: set[str] = set()
        self.ids: list[str] = []

    def build(self, files: dict[str, bytes], parent: str | None, tag: str, labels: dict[str, str] | None = None) -> str:
        buf = io.BytesIO()
        lines = [f"FROM {parent or 'scratch'}"] + [f"COPY {name} /{name}" for name in files]
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in {"Dockerfile": "\n".join(lines).encode() + b"\n", **files}.items():
                ti = tarfile.TarInfo(name)
                ti.size, ti.mtime = len(data), MTIME
                tar.addfile(ti, io.BytesIO(data))
        buf.seek(0)
        image, _ = self.client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True,
                                            labels=labels)
        self.refs.add(tag)
        self.ids.append(image.id)
        return image.id

    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = ref.rsplit(":", 1)
        self.client.api.tag(image_id, repo, tag)
        self.refs.add(ref)

    def chain(self, registry: str, sizes=(1 << 20, 512 << 10, 64 << 10), seed: bytes | None = None,
              torch="2.9.1") -> list[ImagePlan]:
        """base -> runtime -> dev with random payloads; returns their ImagePlans (tags in `registry`)."""
        plans: list[ImagePlan] = []
        parent_id = None
        for flavor, size in zip(("base", "runtime", "dev"), sizes, strict=True):
            data = (seed or b"") + os.urandom(size)
            plan = image_plan(registry, flavor, plans[-1].tag if plans else None, torch)
            parent_id = self.build({f"{flavor}.bin": data}, parent_id, plan.tag)
            plans.append(plan)
        for p in plans:
            self.refs.update(references(p))
        return plans

    def cleanup(self) -> None:
        for ref in sorted(self.refs, key=len, reverse=True):
            try:
                self.client.api.remove_image(ref, force=True, noprune=False)
            except Exception:
                pass
        for image_id in reversed(self.ids):
            try:
                self.client.api.remove_image(image_id, force=True)
            except Exception:
                pass


def image_plan(registry: str, flavor: str, parent: str | None, torch: str = "2.9.1") -> ImagePlan:
    osinfo = OSInfo("debian12", "debian", "12", "bookworm", "3.11", (), "http://deb.debian.org/debian", "2.36")
    key = f"{torch}-cpu-py3.11-debian12"
    variant = ResolvedVariant(
        key=key, name="pytorch", registry=registry, versions=Versions(torch, "cpu", "3.11", "debian12"),
        cuda_tag="cpu", os=osinfo, base=BaseSource("bootstrap"), torch_index_url=None,
        flavors=("base", "runtime", "dev"), tf32=True, gpu_archs=(), arch_list=(), min_driver=None)
    repo = f"{registry}/pytorch"
    minor = ".".join(torch.split(".")[:2])
    return ImagePlan(id=f"{key}-{flavor}", tag=f"{repo}:{key}-{flavor}", flavor=flavor, parent=parent,
                     variant=variant, dockerfile="", build_args={}, context_files={}, labels={},
                     inputs_hash=f"{key}-{flavor}", aliases=(f"{repo}:{minor}-cpu-{flavor}",))


def ns() -> str:
    return "ibdev-push-" + secrets.token_hex(4)


def auth(address: str, password: str = PASSWORD) -> RegistryAuth:
    return RegistryAuth(address, USER, password, source="options")


def cpu_image(request, flavor: str) -> str:
    """The real images/cpu.yaml image of `flavor` (conftest.cpu_build, built once per session), or the image named by
    IMAGEBUILD_SMOKE_IMAGE (runtime) / IMAGEBUILD_SMOKE_DEV_IMAGE (dev)."""
    override = os.environ.get({"runtime": "IMAGEBUILD_SMOKE_IMAGE", "dev": "IMAGEBUILD_SMOKE_DEV_IMAGE"}[flavor])
    if override:
        return override
    build = request.getfixturevalue("cpu_build")
    assert build.result.returncode == 0, build.result.stdout[-3000:] + build.result.stderr[-3000:]
    return next(i.tag for i in build.plan.images if i.flavor == flavor)


def under_pty(argv: list[str], timeout: float = 120.0) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as its stdin/stdout/stderr (an interactive start): (exit status, output)."""
    import pty
    import select
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: exec argv on the terminal
        os.execvp(argv[0], argv)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out.extend(data)
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace").replace("\r\n", "\n")


def cosign_key_pair(cosign: str, prefix: Path, password: str) -> Path:
    """A real cosign key pair, PREFIX.key (0600, as cosign writes it) and PREFIX.pub, the key under `password`."""
    done = subprocess.run([cosign, "generate-key-pair", "--output-key-prefix", str(prefix)],
                          env={**os.environ, "COSIGN_PASSWORD": password}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return prefix


def code_server_stage(variant: ResolvedVariant) -> tuple[str, dict[str, bytes], RenderedImage]:
    """The dev Dockerfile's code-server stage as rendered for `variant` (its `vscode` pin set), as lines for the image
    provider's `derive` (whose FROM stands for the stage's parent, SOURCE_DATE_EPOCH given a value): (the lines, the
    context file the stage copies, the rendered image)."""
    import re

    from imagebuild.render import render_image

    rendered = render_image(variant, "dev")
    stage = re.search(r"^FROM \$\{BASE_IMAGE\} AS code-server\n(.*?)(?=^FROM )", rendered.dockerfile,
                      flags=re.M | re.S)
    assert stage, rendered.dockerfile
    lines = stage.group(1).replace("ARG SOURCE_DATE_EPOCH\n", f"ARG SOURCE_DATE_EPOCH={MTIME}\n")
    return lines, {"files/build-code-server": rendered.context_files["files/build-code-server"]}, rendered
