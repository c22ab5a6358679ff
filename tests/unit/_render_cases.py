"""The resolved variants the render tests (golden Dockerfiles, context files) render (no tests here). Imported as
`from _render_cases import ...` by tests/unit/test_render_*.py.
"""

from __future__ import annotations

from imagebuild.models import FLAVORS, BaseSource, OSInfo, ResolvedVariant, Versions

UBUNTU2404 = OSInfo("ubuntu24.04", "ubuntu", "24.04", "noble", "3.12", ("3.10", "3.11", "3.13", "3.14"),
                    "http://archive.ubuntu.com/ubuntu", "2.39")
DEBIAN12 = OSInfo("debian12", "debian", "12", "bookworm", "3.11", (), "http://deb.debian.org/debian", "2.36")

CU128_TE = ResolvedVariant(
    key="2.9.1-cuda12.8-py3.12-ubuntu24.04", name="pytorch", registry="registry.example.internal:5000/ml",
    versions=Versions(torch="2.9.1", cuda="12.8", python="3.12", os="ubuntu24.04", cudnn="9.10.2.21", nccl="2.27.5",
                      triton="3.5.1", torchvision="0.24.1", torchaudio="2.9.1", transformer_engine="2.9.0"),
    cuda_tag="cu128", os=UBUNTU2404, base=BaseSource("bootstrap", mirror="http://archive.ubuntu.com/ubuntu"),
    torch_index_url=None, flavors=FLAVORS, tf32=True, gpu_archs=("sm_90",), arch_list=("sm_80", "sm_90", "sm_100"),
    min_driver="525.60.13", fp8_min_arch="sm_89", gpus=(("h100", "9.0"), ("h200", "9.0")),
)
CU130 = ResolvedVariant(
    key="2.9.1-cuda13.0-py3.13-ubuntu24.04", name="pytorch", registry="registry.example.internal:5000/ml",
    versions=Versions(torch="2.9.1", cuda="13.0", python="3.13", os="ubuntu24.04", cudnn="9.13.0.50", nccl="2.27.7",
                      triton="3.5.1", torchvision="0.24.1", torchaudio="2.9.1"),
    cuda_tag="cu130", os=UBUNTU2404, base=BaseSource("registry", ref="ubuntu:24.04"),
    torch_index_url="https://download.pytorch.org/whl/cu130", flavors=FLAVORS, tf32=True, gpu_archs=("sm_90",),
    arch_list=("sm_80", "sm_90", "sm_100", "sm_120"), min_driver="580.65.06",
    apt_packages={"dev": ("tmux",)}, pip_packages={"dev": ("ipywidgets",)},
)
CPU = ResolvedVariant(
    key="2.13.0-cpu-py3.11-debian12", name="pytorch-cpu", registry="",
    versions=Versions(torch="2.13.0", cuda="cpu", python="3.11", os="debian12"),
    cuda_tag="cpu", os=DEBIAN12, base=BaseSource("bootstrap"), torch_index_url="https://download.pytorch.org/whl/cpu",
    flavors=FLAVORS, tf32=False, gpu_archs=(), arch_list=(), min_driver=None,
)
