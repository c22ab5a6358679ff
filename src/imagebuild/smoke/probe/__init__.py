"""In-image probe: a dependency-free package (standard library, plus torch and what the image ships) that runs
inside an image with the image's own python and prints ONE JSON document. It never imports imagebuild.

One module per kind of check (goss style), each with a `run(probe)` and the pure parsing helpers it needs; the
sections, the lowest flavor each applies to and where each runs are rows of ONE table (table.py), from which the
command line dispatches and the suite selects:

    system       python, OS release, default user, env (NVIDIA vars, secret-looking names), /dev/shm
    hygiene      (as root) no SSH host keys, nothing in /tmp or /var/tmp, no pip/apt caches
    versions     torch/CUDA/cuDNN/NCCL/... versions; versions_match (the suite's comparison rule)
    libraries    one copy of each cuDNN/NCCL/cuBLAS library
    cudalibs     one loadable libnccl, its version = torch's build = torch's pin; one CUDA major across the nvidia-*
                 wheels, cuDNN and cuBLAS
    coverage     which SASS/PTX every CUDA ELF carries (fatbin.py reads .nv_fatbin headers): which GPUs run it
    gpu          devices, nvidia-smi -L (MIG), arch list
    tf32         TF32 policy at import; GPU speed-up and accuracy
    amp          autocast training steps (CUDA fp16/bf16, CPU bf16)
    distributed  NCCL/gloo all_reduce in child processes; NCCL_DEBUG log parsing
    te           transformer_engine import and FP8 (in a child process)
    torch_compile  section "compile": torch.compile (Inductor C++ on CPU, Triton on CUDA) vs eager; names what the
                 toolchain lacks (compiler, Python.h, libcuda in the loader cache)
    release      PyTorch's release smoke checks: OpenMP, CPU ISA, conv2d, SVD, numpy; cuDNN/NCCL versions vs
                 compile-time and the nvidia-* packages; CUDA and GDS error paths
    dev          C++ extension, nvcc; services: JupyterLab, sshd
    vscode       code-server (dev images built with `vscode:`): its version against the image's pin; services: it
                 starts on loopback and serves only after a login with its password
    perf         GEMM TFLOP/s, NCCL bus bandwidth
    table        the sections (module, lowest flavor, where it runs: image user, root, arbitrary UID, hpc; child
                 probe) and the checks each reports (GPU or not): the suite's tests are generated from its rows
    common       Probe (results, torch import, GPU state), subprocess helpers
    watchdog     the end on overrun: the partial JSON (marked), the children killed and their files removed, exit 3
    summary      the short text table of a saved result (--table)
    environ      os.environ for a block (set or remove variables, then put back what was there)
    lifeline     the forkserver and its children die with their parent (PR_SET_PDEATHSIG): no orphan outlives a
                 probe the watchdog ended
    children     the child probes (compile, gloo/NCCL ranks, TE, release): forked by the standard library's
                 forkserver with torch preloaded where torch is installed, else fresh pythons
    __main__     the command line: --sections --perf --timeout --output --table --list-sections --list-checks (+ hidden
                 --dist-worker, --child)
    pack         builds the one-file zipapp (probe.pyz) that is shipped into containers

Inside the package, modules import each other by the top-level name `probe` (no relative imports), which is what
they are in the zipapp and under `PYTHONPATH=<parent> python -m probe`. Imported as `imagebuild.smoke.probe` (unit
tests, the runner), this file makes `probe` name this same package first.

Every check in `checks` has name, section, status (passed|failed|skipped), reason and figures.
"""

from __future__ import annotations

import os
import sys

if __name__ != "probe":
    _here = os.path.dirname(os.path.abspath(__file__))
    _other = sys.modules.get("probe")
    if _other is not None and os.path.dirname(os.path.abspath(getattr(_other, "__file__", "") or "")) != _here:
        raise ImportError(f"a different top-level module 'probe' is loaded ({_other!r}): {__name__} imports its "
                          f"modules as probe.*")
    sys.modules.setdefault("probe", sys.modules[__name__])

from probe.common import (  # noqa: E402
    DEFAULT_SECTIONS,
    NO_CUDA_TORCH,
    NO_GPU,
    NO_TORCH,
    PROBE_VERSION,
    RESULT_MARK,
    SECTIONS,
    Probe,
)
from probe.coverage import failures as coverage_failures  # noqa: E402
from probe.coverage import judge as judge_coverage  # noqa: E402
from probe.coverage import summary as coverage_summary  # noqa: E402
from probe.cudalibs import same_version as same_nccl_version  # noqa: E402
from probe.distributed import dist_worker, nccl_transport_kind, parse_nccl_log  # noqa: E402
from probe.gpu import normalize_arch, parse_nvidia_smi_list  # noqa: E402
from probe.hygiene import findings as hygiene_findings  # noqa: E402
from probe.libraries import (  # noqa: E402
    describe_copies,
    group_library_copies,
    library_family,
    library_key,
    owners_of,
    parse_ldconfig,
)
from probe.linking import evaluate as evaluate_ldd  # noqa: E402
from probe.linking import parse_ldd, where_found  # noqa: E402
from probe.locales import effective_ctype, is_utf8_name, parse_environ  # noqa: E402
from probe.pack import build_zipapp, zipapp_path  # noqa: E402
from probe.pipcheck import parse_pip_check  # noqa: E402
from probe.services import parse_sshd_config_files, parse_sshd_T  # noqa: E402
from probe.summary import render_table  # noqa: E402
from probe.system import NVIDIA_ENV, REPORTED_ENV, find_secret_env, parse_os_release  # noqa: E402
from probe.table import (  # noqa: E402
    ARBITRARY_UID,
    CHECKS,
    FLAVORS,
    HPC,
    IMAGE_USER,
    ROOT,
    SIDE_CONTAINERS,
    TABLE,
    WHERE,
    Check,
    Section,
    applies,
    check_row,
    checks_for,
    section,
    sections_for,
    sections_problem,
)
from probe.tf32 import tf32_state  # noqa: E402
from probe.versions import ABSENT, TRUE, format_cudnn_version, versions_match  # noqa: E402

if __name__ != "probe":  # a later import of <this package>.gpu gets the module already loaded as probe.gpu
    for _name, _mod in list(sys.modules.items()):
        if _name.startswith("probe."):
            sys.modules.setdefault(__name__ + _name[len("probe"):], _mod)

__all__ = [
    "ABSENT", "ARBITRARY_UID", "CHECKS", "Check", "DEFAULT_SECTIONS", "applies", "check_row", "checks_for", "FLAVORS",
    "HPC", "IMAGE_USER", "ROOT", "SIDE_CONTAINERS", "TABLE", "WHERE", "Section", "section", "sections_for", "sections_problem", "NO_CUDA_TORCH", "NO_GPU", "NO_TORCH", "NVIDIA_ENV", "PROBE_VERSION", "REPORTED_ENV",
    "RESULT_MARK", "SECTIONS", "TRUE", "Probe", "build_zipapp", "dist_worker", "effective_ctype", "evaluate_ldd",
    "describe_copies", "find_secret_env", "format_cudnn_version", "group_library_copies", "hygiene_findings", "owners_of", "is_utf8_name", "library_family",
    "library_key", "nccl_transport_kind", "normalize_arch", "parse_environ", "parse_ldconfig",
    "parse_ldd", "parse_nccl_log", "parse_nvidia_smi_list", "parse_os_release", "parse_pip_check",
    "parse_sshd_T", "parse_sshd_config_files", "render_table",
    "tf32_state", "versions_match", "where_found", "zipapp_path", "coverage_failures", "judge_coverage",
    "coverage_summary", "same_nccl_version",
]
