"""Render one image (variant x flavor) from the Jinja2 templates: Dockerfile text, build args, context, labels.

Pure and byte-deterministic: the same variant, flavor and inputs give the same RenderedImage (CA files are read from
disk, by content). Nothing volatile is rendered: BASE_IMAGE, CREATED and REVISION are build args the builder passes.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from imagebuild.backends import backend_of, spec
from imagebuild.compat import accel
from imagebuild.errors import UsageError
from imagebuild.files import FileProblem, certificate_blocks
from imagebuild.inputs import BuildInputs
from imagebuild.lock.model import LockedImage, requirements_text
from imagebuild.models import FLAVORS, PARENT_FLAVOR, ResolvedVariant
from imagebuild.render import data, tiers
from imagebuild.render.hardware import BASE_KEYS, hardware_labels
from imagebuild.render.te_key import KEY_LABEL, te_build_key
from imagebuild.secrets import has_credentials, redact

# Build args the builder passes on every build and that are not part of the inputs hash.
# SOURCE_DATE_EPOCH follows from BASE_IMAGE (the OS image's date), so it changes nothing the base ID does not.
VOLATILE_BUILD_ARGS: tuple[str, ...] = ("BASE_IMAGE", "CREATED", "REVISION", "SOURCE_DATE_EPOCH")
# pip builder stages install into STAGE_ROOT + /opt/venv, laid out as under / (one `COPY --from=pip /opt/stage/ /`)
STAGE_ROOT = "/opt/stage"
STAGE_PREFIX = STAGE_ROOT + "/opt/venv"
# Context layout (relative paths inside the build context).
CA_DIR = "ca"
FILES_DIR = "files"
WHEELHOUSE_DIR = "wheelhouse"
LOCK_REQUIREMENTS = "lock/requirements.txt"  # the image's locked pip files (pip install --require-hashes -r)


@dataclass
class RenderedImage:
    dockerfile: str
    build_args: dict[str, str] = field(default_factory=dict)  # hashed; BASE_IMAGE/CREATED/REVISION not included
    secret_build_args: dict[str, str] = field(default_factory=dict)  # credentialed index URLs: never hash/log them
    context_files: dict[str, bytes] = field(default_factory=dict)  # context path -> content
    context_dirs: dict[str, Path] = field(default_factory=dict)  # context path -> host folder (wheelhouse)
    labels: dict[str, str] = field(default_factory=dict)  # deterministic labels (also in the Dockerfile's LABEL)
    pip_requirements: tuple[str, ...] = ()  # what the flavor's pip stage asks for (the lock pins its closure)
    apt_packages: tuple[str, ...] = ()  # final-stage apt packages from the OS archive (the lock pins their versions)
    env_layers: tuple[tuple[str, str], ...] = ()  # the environment's layers in order: (tier name, what it holds)


@functools.lru_cache(maxsize=1)
def templates_dir() -> Path:
    """The packaged `imagebuild/_templates` (wheel install), else the repository's `templates/` (source checkout)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_templates", package.parent.parent / "templates"):
        if (candidate / "base.Dockerfile.j2").is_file():
            return candidate
    raise FileNotFoundError(f"imagebuild templates not found (looked in {package / '_templates'} and the source tree)")


def _dq(value: object) -> str:
    """A Dockerfile double-quoted string (LABEL/ENV values)."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{text}"'


@functools.lru_cache(maxsize=4)
def _environment(root: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        auto_reload=False,  # templates don't change during a run; skips a stat() per render
    )
    env.filters["shquote"] = lambda s: shlex.quote(str(s))
    env.filters["dq"] = _dq
    return env


def render_template(name: str, **ctx: object) -> str:
    return _environment(str(templates_dir())).get_template(name).render(**ctx)


@functools.lru_cache(maxsize=64)
def _render_file(name: str, **ctx: object) -> bytes:
    """Support files depend on a few scalars only: render each distinct one once per process."""
    return render_template(name, **ctx).encode()


def tidy(text: str) -> str:
    """Trailing spaces off, at most one blank line in a row, exactly one final newline."""
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if not line and (not out or not out[-1]):
            continue
        if line.startswith("FROM ") and len(out) > 1 and not out[-1] and out[-2].startswith("#"):
            out.pop()  # a comment block right above the stage it describes
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def _dedupe(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def cuda_major(variant: ResolvedVariant) -> int | None:
    cuda = variant.versions.cuda
    return None if cuda == "cpu" else int(cuda.split(".")[0])


def pinned_torch_requirements(variant: ResolvedVariant) -> list[str]:
    """Exact pins. A non-PyPI build (variant.torch_index_url set) is pinned with its local label (`+cu130`, `+cpu`), so
    it can only come from that index or a wheelhouse, never silently from PyPI's default CUDA build."""
    v = variant.versions
    local = f"+{variant.cuda_tag}" if variant.torch_index_url else ""
    reqs = [f"torch=={v.torch}{local}"]
    if v.torchvision:
        reqs.append(f"torchvision=={v.torchvision}{local}")
    if v.torchaudio:
        reqs.append(f"torchaudio=={v.torchaudio}{local}")
    return reqs


def _ca_files(variant: ResolvedVariant, inputs: BuildInputs) -> dict[str, bytes]:
    paths = _dedupe([str(p) for p in variant.ca_certs] + [str(p) for p in inputs.ca_certs])
    files: dict[str, bytes] = {}
    for n, raw in enumerate(paths):
        path = Path(raw)
        try:
            content = certificate_blocks(path)  # only the certificates: a key beside them never reaches the image
        except FileProblem as exc:
            raise UsageError(f"CA file {exc}") from None
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name.removesuffix(".crt").removesuffix(".pem")) or "ca"
        files[f"{CA_DIR}/{n}-{stem}.crt"] = content
    return files


# The base flavor holds only the OS, its Python, CA files, the user and the NVIDIA runtime variables: nothing of torch.
# Its Dockerfile and labels name only what it contains, so variants that differ above it (torch 2.7.1 vs 2.9.1 on the
# same OS/Python/CUDA) share one base image: same inputs hash, built once, tagged for each variant.
BASE_LABEL_KEYS = ("io.imagebuild.cuda", "io.imagebuild.python", "io.imagebuild.os", "io.imagebuild.flavor",
                   "io.imagebuild.matrix-key", "org.opencontainers.image.title", "org.opencontainers.image.version",
                   "org.opencontainers.image.source")


def base_key(variant: ResolvedVariant) -> str:
    v = variant.versions
    return f"{accel(v.cuda)}-py{v.python}-{v.os}"


def _labels(variant: ResolvedVariant, flavor: str) -> dict[str, str]:
    labels = _variant_labels(variant, flavor)
    if flavor == "base":
        labels["io.imagebuild.matrix-key"] = labels["org.opencontainers.image.version"] = base_key(variant)
        labels = {k: v for k, v in labels.items() if k in BASE_LABEL_KEYS or k in BASE_KEYS}
    return labels


def _variant_labels(variant: ResolvedVariant, flavor: str) -> dict[str, str]:
    v = variant.versions
    labels = {
        "org.opencontainers.image.title": f"{variant.name}-{flavor}",
        "org.opencontainers.image.version": variant.key,
        "org.opencontainers.image.source": data.SOURCE_URL,
        "io.imagebuild.torch": v.torch,
        "io.imagebuild.torchvision": v.torchvision or "",
        "io.imagebuild.torchaudio": v.torchaudio or "",
        "io.imagebuild.cuda": v.cuda,
        "io.imagebuild.cudnn": v.cudnn or "",
        "io.imagebuild.nccl": v.nccl or "",
        "io.imagebuild.python": v.python,
        "io.imagebuild.os": v.os,
        "io.imagebuild.transformer-engine": v.transformer_engine or "",
        "io.imagebuild.triton": v.triton or "",
        "io.imagebuild.flavor": flavor,
        "io.imagebuild.gpu-archs": ",".join(variant.gpu_archs),
        "io.imagebuild.tf32": "true" if variant.tf32 else "false",
        "io.imagebuild.matrix-key": variant.key,
    }
    labels.update(hardware_labels(variant, flavor))  # target GPUs, driver floor (render/hardware.py)
    if flavor == "dev" and variant.vscode:  # `imagebuild run --vscode` reads it: which code-server the image holds
        labels[CODE_SERVER_LABEL] = variant.vscode
    te_key = te_build_key(variant)
    if te_key:  # which cached TE wheel the image holds: part of the inputs hash, unlike the wheel's bytes
        labels[KEY_LABEL] = te_key
    return dict(sorted(labels.items()))


def pip_index(variant: ResolvedVariant, inputs: BuildInputs,
              with_torch: bool) -> tuple[dict[str, str], dict[str, str], list[str], str]:
    """(public build args, secret build args, ARG names, redacted comment) for the builder stages."""
    extras = list(inputs.pip_extra_index_urls)
    if with_torch and variant.torch_index_url:  # resolve applied --torch-index-url (resolve/origins.torch_index)
        extras.append(variant.torch_index_url)
    extras = _dedupe(u.strip() for u in extras if u and u.strip())
    values: dict[str, str] = {}
    if inputs.pip_index_url:
        values["PIP_INDEX_URL"] = inputs.pip_index_url.strip()
    if extras:
        values["PIP_EXTRA_INDEX_URL"] = " ".join(extras)
    public: dict[str, str] = {}
    secret: dict[str, str] = {}
    for name, value in values.items():
        (secret if any(has_credentials(u) for u in value.split()) else public)[name] = value
    comment = "; ".join(
        f"{'index' if name == 'PIP_INDEX_URL' else 'extra'}={redact(value)}" for name, value in values.items()
    )
    return public, secret, sorted(values), comment


def cuda_pip_toolchain(cuda: str) -> list[str]:
    """The CUDA 13+ compiler from PyPI, every part pinned to the variant's CUDA minor.

    nvidia-cuda-nvcc 13.0.88 requires nvidia-nvvm and nvidia-cuda-crt *unpinned*, so pip takes the newest (13.5):
    cicc 13.5 then writes PTX 9.5 that ptxas 13.0 rejects ("Unsupported .version 9.5") — seen in a real build.
    """
    return [f"{pkg}=={cuda}.*" for pkg in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl")]


@dataclass(frozen=True)
class Common:
    """What every flavor's template variables and parts are made from."""

    variant: ResolvedVariant
    flavor: str
    py: str  # "3.12"
    cuda_major: int | None  # None for CPU
    venv_site: str
    stage_site: str
    extra_pip: list[str]  # the matrix's pip_packages / apt_packages for this flavor
    extra_apt: list[str]
    deadsnakes: dict[str, str] | None  # the PPA when the Python is not the OS's own (Ubuntu only)

    @classmethod
    def of(cls, variant: ResolvedVariant, flavor: str) -> Common:
        py = variant.versions.python
        return cls(variant=variant, flavor=flavor, py=py, cuda_major=cuda_major(variant),
                   venv_site=f"/opt/venv/lib/python{py}/site-packages",
                   stage_site=f"{STAGE_PREFIX}/lib/python{py}/site-packages",
                   extra_pip=list(variant.pip_packages.get(flavor, ())),
                   extra_apt=list(variant.apt_packages.get(flavor, ())), deadsnakes=_deadsnakes(variant))

    def context(self, labels: dict[str, str]) -> dict[str, object]:
        """The template variables every flavor has (the flavor's parts and the pip stage fill in the rest)."""
        variant, flavor = self.variant, self.flavor
        return {
            "v": variant,
            "header_key": base_key(variant) if flavor == "base" else variant.key,
            "flavor": flavor,
            "parent_flavor": PARENT_FLAVOR[flavor],
            "labels": labels,
            "python": f"python{self.py}",
            "venv_site": self.venv_site,
            "stage_site": self.stage_site,
            "stage_prefix": STAGE_PREFIX,
            "cuda_major": self.cuda_major,
            "deadsnakes": self.deadsnakes,
            "base_default": None,
            "ca_files": [],
            "wheelhouse": False,
            "pip_arg_names": [],
            "pip_index_comment": "",
            "pip_lock": False,
            "apt_pins": {},
            "security_refresh": None,  # build --security-refresh: this image's index identity and upgrades
        }


@dataclass
class _Parts:
    """What one flavor adds: template variables, context files, and what its pip stage installs."""

    ctx: dict[str, object]
    files: dict[str, bytes] = field(default_factory=dict)
    pip_requirements: list[str] = field(default_factory=list)
    apt: list[str] = field(default_factory=list)  # final-stage apt packages from the OS archive (not a PPA/NVIDIA)
    layers: list[tiers.Tier] = field(default_factory=list)  # the runtime's environment layers, in order


def _os_archive(c: Common, packages: Iterable[str]) -> list[str]:
    """The packages that come from the OS archive (the lock resolves and pins those): not deadsnakes' Pythons."""
    py = c.py
    ppa = {f"python{py}", f"python{py}-venv", f"python{py}-dev", f"libpython{py}-dev"} if c.deadsnakes else set()
    return sorted(set(packages) - ppa)


def _deadsnakes(variant: ResolvedVariant) -> dict[str, str] | None:
    py, osinfo = variant.versions.python, variant.os
    if py == osinfo.system_python:
        return None
    if osinfo.family != "ubuntu":
        raise UsageError(
            f"{variant.key}: Python {py} is not {osinfo.id}'s own ({osinfo.system_python}) and only Ubuntu "
            "can add Pythons (deadsnakes)"
        )
    return {"url": data.DEADSNAKES_URL, "key_url": data.DEADSNAKES_KEY_URL, "fingerprint": data.DEADSNAKES_FINGERPRINT}


def _base_parts(c: Common, inputs: BuildInputs) -> _Parts:
    """The OS, its Python and venv, CA files, the matrix's extra packages; nothing of torch."""
    variant, py = c.variant, c.py
    ca = _ca_files(variant, inputs)
    python_apt = [f"python{py}", f"python{py}-venv"] if c.deadsnakes else ["python3", "python3-venv"]
    base_apt = sorted(set(data.BASE_APT) | set(python_apt) | set(c.extra_apt))
    ctx: dict[str, object] = {
        "base_default": variant.base.ref if variant.base.kind == "registry" and variant.base.ref else None,
        "ca_files": sorted(ca),
        "base_apt": base_apt,
        "require_cuda": None if c.cuda_major is None else f"cuda>={variant.versions.cuda}",
        "base_pip": c.extra_pip,
    }
    return _Parts(ctx, files=ca, pip_requirements=c.extra_pip, apt=_os_archive(c, base_apt))


def _runtime_parts(c: Common, inputs: BuildInputs) -> _Parts:
    """torch and friends (exact pins), transformer_engine when the variant has it, the TF32 policy files."""
    torch_pins = pinned_torch_requirements(c.variant)
    torch_requirements = torch_pins + c.extra_pip
    te = transformer_engine_context(c)
    layers = tiers.runtime_tiers(c.variant, torch_pins, te["requirements"] if te else (), c.extra_pip)  # type: ignore[arg-type]
    ctx: dict[str, object] = {
        "te": te,
        "tiers": layers,
        "env_tiers": tiers.env_tiers(layers),
        "env": {"stage": tiers.ENV_STAGE, "key_stage": tiers.ENV_KEY_STAGE, "arg": tiers.ENV_ARG},
        "tiers_script": tiers.SCRIPT,
        "tiers_spec": tiers.SPEC,
        # torch.compile at run time: compilers + Python.h (data.RUNTIME_COMPILE_APT), not the dev toolchain
        "compile_apt": sorted(set(data.RUNTIME_COMPILE_APT) | {f"libpython{c.variant.versions.python}-dev"}),
        "flavor_apt": sorted(set(c.extra_apt)),
    }
    files = {
        f"{FILES_DIR}/imagebuild_tf32.py": _render_file("files/imagebuild_tf32.py.j2", tf32=c.variant.tf32),
        f"{FILES_DIR}/imagebuild_tf32.pth": _render_file("files/imagebuild_tf32.pth.j2"),
        f"{FILES_DIR}/imagebuild-entrypoint": _render_file("files/imagebuild-entrypoint.j2"),
        **_banner(c),
        tiers.SCRIPT: tiers.script_file(),
        tiers.SPEC: tiers.spec_file(layers),
    }
    apt = _os_archive(c, [*ctx["compile_apt"], *ctx["flavor_apt"]])  # type: ignore[misc]
    return _Parts(ctx, files=files, pip_requirements=torch_requirements, apt=apt, layers=layers)


def transformer_engine_context(c: Common) -> dict[str, object] | None:
    """transformer_engine is built from source in its own stage, with the CUDA compiler of the variant's CUDA minor."""
    v, major = c.variant.versions, c.cuda_major
    if not v.transformer_engine or major is None:
        return None
    cu = f"cu{major}"
    suffix = "" if major >= data.CUDA_PIP_TOOLCHAIN_MIN_MAJOR else f"-{cu}"
    return {
        "version": v.transformer_engine,
        "key": te_build_key(c.variant),
        "apt": sorted(set(data.TE_BUILD_APT) | {f"python{c.py}-dev"}),
        "build_requirements": [
            *data.TE_BUILD_PIP,
            f"transformer_engine=={v.transformer_engine}",
            f"transformer_engine_{cu}=={v.transformer_engine}",
            *(cuda_pip_toolchain(v.cuda) if not suffix else
              [f"nvidia-cuda-nvcc{suffix}=={v.cuda}.*", f"nvidia-cuda-cccl{suffix}=={v.cuda}.*"]),
        ],
        "requirements": [f"transformer_engine[pytorch,core-{cu}]=={v.transformer_engine}"],
    }


def _banner(c: Common) -> dict[str, bytes]:
    """/etc/imagebuild/banner: what imagebuild-entrypoint prints on an interactive start (each flavor its own)."""
    return {f"{FILES_DIR}/imagebuild-banner": render_template("files/imagebuild-banner.j2", v=c.variant,
                                                      flavor=c.flavor).rstrip("\n").encode() + b"\n"}


DEV_FILES = ("jupyter_server_config.py", "jupyter_imagebuild.json", "imagebuild_jupyter_guard.py",
             "sshd_imagebuild.conf", "start-sshd")


def _dev_parts(c: Common, inputs: BuildInputs) -> _Parts:
    """JupyterLab, sshd, build tools and, on CUDA variants, a CUDA compiler (see _cuda_compiler)."""
    dev_pip = [f"jupyterlab=={data.JUPYTERLAB_VERSION}"]
    dev_apt = set(data.DEV_APT) | {f"python{c.py}-dev"} | set(c.extra_apt)
    cuda = _cuda_compiler(c)
    dev_requirements = dev_pip + cuda.pip + c.extra_pip
    ctx: dict[str, object] = {
        "dev_requirements": dev_requirements,
        "dev_apt": sorted(dev_apt | cuda.apt),
        "cuda_apt": cuda.apt_repo,
        "cuda_pip": cuda.pip_home,
        "cuda_env": cuda.env,
    }
    files = {f"{FILES_DIR}/{name}": _render_file(f"files/{name}.j2") for name in DEV_FILES}
    files.update(_banner(c))
    ctx["code_server"] = None
    if c.variant.vscode:
        ctx["code_server"], files[CODE_SERVER_SCRIPT] = _code_server(c.variant)
    return _Parts(ctx, files=files, pip_requirements=dev_requirements, apt=_os_archive(c, sorted(dev_apt)))


CODE_SERVER_PREFIX = "/opt/code-server"
CODE_SERVER_SCRIPT = f"{FILES_DIR}/build-code-server"
CODE_SERVER_LABEL = "io.imagebuild.code-server"
CODE_SERVER_PIN_FILE = "/etc/imagebuild/code-server.json"  # what the probe compares `code-server --version` with
# the builder stage's own packages (never in the image): node-gyp's toolchain for code-server's native modules (the
# kerberos module needs libkrb5-dev), curl for the pinned tarballs
CODE_SERVER_BUILD_APT = ("ca-certificates", "curl", "g++", "libkrb5-dev", "make", "pkg-config", "python3")


def _code_server(variant: ResolvedVariant) -> tuple[dict[str, object], bytes]:
    """The dev flavor's VS Code (matrix `vscode:`): the builder stage's template variables and its build script, every
    tarball pinned by compat/data/code_server.yaml for the variant's platform."""
    from imagebuild.compat import code_server

    table = code_server.load()
    version = variant.vscode or ""
    if version not in table.releases or table.missing_node(version, (variant.platform,)):
        # matrix/fields.py refuses these with FILE:LINE; a variant built in code (tests, derive) gets one line too
        raise UsageError(f"{variant.key}: code-server {version!r} has no pinned Node build for {variant.platform} "
                         f"in {code_server.DATA_FILE}; valid choices: {', '.join(table.choices())}")
    cs, node, npm = table.code_server(version), table.node_for(version, variant.platform), table.npm
    pin = {"code-server": cs.version, "node": node.version, "node_package": node.package, "platform": variant.platform,
           "license": {"code-server": cs.license, "node": node.license}, "integrity": cs.integrity,
           "node_integrity": node.integrity}  # the SBOM's components (inventory/bundled.py) and the probe's pin
    script = render_template("files/build-code-server.j2", cs=cs, node=node, npm=npm, registry=table.registry,
                             platform=variant.platform, prefix=CODE_SERVER_PREFIX, data_file=code_server.DATA_FILE,
                             pin_json=json.dumps(pin, sort_keys=True))
    ctx: dict[str, object] = {
        "version": cs.version,
        "node": node.version,
        "node_package": node.package,
        "script": CODE_SERVER_SCRIPT,
        "prefix": CODE_SERVER_PREFIX,
        "apt": sorted(CODE_SERVER_BUILD_APT),
    }
    return ctx, script.encode()


@dataclass
class _CudaCompiler:
    apt_repo: dict[str, str] | None = None  # NVIDIA's apt repository (CUDA 12)
    pip_home: dict[str, str] | None = None  # CUDA_HOME inside the venv / the pip stage (CUDA 13+)
    env: list[tuple[str, str]] = field(default_factory=list)  # CUDA_HOME, PATH, CPATH (, LIBRARY_PATH)
    apt: set[str] = field(default_factory=set)
    pip: list[str] = field(default_factory=list)


def _cuda_compiler(c: Common) -> _CudaCompiler:
    """nvcc for the dev flavor: from PyPI for CUDA 13+ (pinned to the variant's minor), from NVIDIA's apt repository
    before that; none for CPU. The torch wheels' nvidia-* headers are on CPATH either way."""
    v, major = c.variant.versions, c.cuda_major
    if major is None:
        return _CudaCompiler()
    pip_includes = [f"{c.venv_site}/nvidia/{p}/include" for p in data.NVIDIA_PIP_INCLUDE_PACKAGES]
    if major >= data.CUDA_PIP_TOOLCHAIN_MIN_MAJOR:
        home = f"{c.venv_site}/nvidia/cu{major}"
        return _CudaCompiler(
            pip_home={"home": home, "stage_home": f"{c.stage_site}/nvidia/cu{major}"},
            env=[
                ("CUDA_HOME", home),
                ("PATH", f"{home}/bin:$PATH"),
                ("CPATH", ":".join([f"{home}/include", f"{home}/include/cccl", *pip_includes])),
                ("LIBRARY_PATH", f"{home}/lib"),
            ],
            pip=cuda_pip_toolchain(v.cuda),
        )
    distro = c.variant.os.family + c.variant.os.version.replace(".", "")
    url = data.CUDA_REPO_URL.format(distro=distro, arch=data.cuda_repo_arch(c.variant.platform))
    dashed = v.cuda.replace(".", "-")
    home = f"/usr/local/cuda-{v.cuda}"
    return _CudaCompiler(
        apt_repo={"url": url, "key_url": url + data.CUDA_REPO_KEY, "fingerprint": data.CUDA_REPO_FINGERPRINT},
        env=[("CUDA_HOME", home), ("PATH", f"{home}/bin:$PATH"), ("CPATH", ":".join(pip_includes))],
        apt={f"cuda-nvcc-{dashed}", f"cuda-cudart-dev-{dashed}", f"cuda-cccl-{dashed}"},
    )


_FLAVOR_PARTS: dict[str, Callable[[Common, BuildInputs], _Parts]] = {
    "base": _base_parts,
    "runtime": _runtime_parts,
    "dev": _dev_parts,
}


def render_image(variant: ResolvedVariant, flavor: str, inputs: BuildInputs | None = None,
                 locked: LockedImage | None = None) -> RenderedImage:
    """Render `flavor` ("base" | "runtime" | "dev") of `variant`: the shared template variables, the flavor's own
    parts, and the pip stage's index build args when the flavor installs anything with pip. With `locked` (the
    image's lock entry) its pip stage installs the locked files with --require-hashes and apt installs `name=version`."""
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; valid choices: {', '.join(FLAVORS)}")
    inputs = inputs or BuildInputs()
    common = Common.of(variant, flavor)
    labels = _labels(variant, flavor)
    parts = _FLAVOR_PARTS[flavor](common, inputs)
    ctx = {**common.context(labels), **parts.ctx, "features": spec(backend_of(variant, inputs)).features}
    build_args: dict[str, str] = {}
    secret_args: dict[str, str] = {}
    dirs: dict[str, Path] = {}
    if parts.pip_requirements:
        build_args, secret_args, names, comment = pip_index(variant, inputs, with_torch=flavor == "runtime")
        ctx["pip_arg_names"] = names
        ctx["pip_index_comment"] = comment
        if inputs.wheelhouse is not None:
            ctx["wheelhouse"] = True
            dirs[WHEELHOUSE_DIR] = Path(inputs.wheelhouse)
    files = dict(parts.files)
    refresh = inputs.refresh_for(f"{variant.key}-{flavor}")
    if refresh is not None:  # only then: a default render stays byte-identical
        ctx["security_refresh"] = {"index": refresh.index, "upgrade": list(refresh.upgrade)}
    if locked is not None:
        ctx["apt_pins"] = {p: locked.apt[p] for p in parts.apt if p in locked.apt}
        if parts.pip_requirements:
            ctx["pip_lock"] = LOCK_REQUIREMENTS
            files[LOCK_REQUIREMENTS] = requirements_text(locked).encode()

    dockerfile = tidy(render_template(f"{flavor}.Dockerfile.j2", **ctx))
    return RenderedImage(
        dockerfile=dockerfile,
        build_args=dict(sorted(build_args.items())),
        secret_build_args=dict(sorted(secret_args.items())),
        context_files=dict(sorted(files.items())),
        context_dirs=dirs,
        labels=labels,
        pip_requirements=tuple(parts.pip_requirements),
        apt_packages=tuple(parts.apt),
        env_layers=tuple((t.name, t.holds) for t in parts.layers) + _code_server_layer(ctx.get("code_server")),
    )


def _code_server_layer(code_server: object) -> tuple[tuple[str, str], ...]:
    """The dev image's VS Code layer (the code-server stage's copy onto /) as a layer row of its own: the report gives
    its size, and the layer limit applies to it like to a runtime tier."""
    if not isinstance(code_server, dict):
        return ()
    return (("code-server", f"code-server {code_server['version']} on Node {code_server['node']}"),)
