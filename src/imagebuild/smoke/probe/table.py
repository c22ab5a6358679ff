"""The one table of in-image checks. Two kinds of rows:

- a Section: the module that runs it, the lowest image flavor it applies to, and where it runs. The probe's
  dispatch (`--sections`, `--child`) and the suite's selection (which sections each probe run covers) are read from
  these rows, so a section's flavor and place are stated once;
- a Check: one named result the probe reports (`section.check`), whether it needs a GPU, and a flavor of its own
  where it applies from higher up than its section. The suite generates ONE test per Check row (suite/test_checks.py)
  and fails a probe run that reports a check no row names, or misses one a row names.

Adding a check to an existing section: the probe code that reports it (`p.check("SECTION.NAME", ...)`) and one
Check row below (and its two-sided unit test). Adding a section: its probe module (a `run(probe)`, plus
`child(probe)` when part of it runs in a child probe), one Section row and the Check rows of what it reports.

The suite reads this table from the same probe files it ships into the container (it loads the probe package from
its directory, never imagebuild); anything else can ask a probe for it: `python probe.pyz --list-sections` prints
the rows as JSON. Standard library only, like every probe module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

FLAVORS = ("base", "runtime", "dev")  # each flavor is built on the one before it and carries its checks
# where a section's probe runs
IMAGE_USER = "image-user"  # the suite's main probe: the image's own user, in the container started as users do
ROOT = "root"  # a probe of its own as root in the same container, before the main probe writes anything (/tmp)
ARBITRARY_UID = "arbitrary-uid"  # a side container of the image started as --user 12345:0 (OpenShift's policy)
# a side container started as enroot/pyxis and Apptainer start images on Slurm clusters: an unknown UID/GID (no
# group 0), no USER, a read-only root, an empty HOME from outside, a hostile host environment (smoke/sides.py)
HPC = "hpc"
WHERE = (IMAGE_USER, ROOT, ARBITRARY_UID, HPC)
SIDE_CONTAINERS = (ARBITRARY_UID, HPC)  # the places that are containers of their own (the runner starts them)


@dataclass(frozen=True)
class Section:
    name: str  # the section (`--sections NAME`), the prefix of its checks' names (`NAME.check`)
    module: str  # probe.<module> holds run(probe) (and child(probe) when `child`)
    flavor: str  # the lowest flavor it applies to
    where: str = IMAGE_USER
    child: bool = False  # part of its work runs in a child probe (`--child NAME`): a crash there cannot end the probe
    opt_in: bool = False  # only when asked for (`--perf`): needs time or hardware a smoke run does not assume


@dataclass(frozen=True)
class Check:
    name: str  # `section.check`, exactly as the probe reports it and as the suite's result names it
    gpu: bool = False  # needs a GPU: skipped without one (a failure under --require-gpu, unless torch is CPU-only)
    only_from: str | None = None  # a flavor above its section's from which on it applies (hpc.jupyter: dev)

    @property
    def section(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def flavor(self) -> str:
        """The lowest flavor this check applies to."""
        return self.only_from or BY_NAME[self.section].flavor

    @property
    def where(self) -> str:
        return BY_NAME[self.section].where

    @property
    def opt_in(self) -> bool:
        return BY_NAME[self.section].opt_in


# The order is the run order within one probe: hygiene right after system, before later sections (compile caches,
# child probes) write to /tmp when everything runs in one process (`python probe.pyz` by hand); compile, which waits
# for the child started ahead, comes last, so that all of the probe's own work (dev's C++ build, Jupyter) overlaps
# that child. release's ISA lookup shares Inductor's cache and locks with the child: it finds the child's answers.
TABLE = (
    Section("system", "system", "base"),
    Section("hygiene", "hygiene", "base", ROOT),
    Section("locale", "locales", "base"),
    Section("pip", "pipcheck", "base"),
    Section("ldd", "sharedlibs", "base"),
    Section("uid", "uid", "base", ARBITRARY_UID),
    Section("versions", "versions", "base"),
    Section("libraries", "libraries", "base"),
    Section("cudalibs", "cudalibs", "runtime"),
    Section("coverage", "coverage", "runtime"),
    Section("gpu", "gpu", "runtime"),
    Section("tf32", "tf32", "runtime"),
    Section("amp", "amp", "runtime"),
    Section("distributed", "distributed", "runtime"),
    Section("dev", "dev", "dev"),
    Section("vscode", "vscode", "dev"),  # code-server, where the dev image has it (matrix `vscode:`); else skipped
    Section("te", "te", "runtime", child=True),
    Section("release", "release", "runtime", child=True),
    Section("compile", "torch_compile", "runtime", child=True),
    Section("hpc", "hpcruntime", "runtime", HPC),
    Section("perf", "perf", "runtime", opt_in=True),
)
BY_NAME = {s.name: s for s in TABLE}
SECTIONS = tuple(s.name for s in TABLE)
# a probe run without --sections: what applies to every flavor below dev and needs no opt-in
DEFAULT_SECTIONS = tuple(s.name for s in TABLE if s.flavor != "dev" and not s.opt_in)

# Every check a probe reports (versions reports facts the suite compares, no checks of its own).
CHECKS = (
    Check("system.ca_bundle"),
    Check("hygiene.ssh_host_keys"),
    Check("hygiene.tmp"),
    Check("hygiene.pip_cache"),
    Check("hygiene.apt_cache"),
    Check("locale.utf8"),
    Check("locale.python"),
    Check("pip.check"),
    Check("ldd.resolve"),
    Check("ldd.machine"),
    Check("uid.home_writable"),
    Check("uid.tmp_writable"),
    Check("uid.torch_import"),
    Check("libraries.one_copy"),
    Check("cudalibs.nccl_one"),
    Check("cudalibs.nccl_version"),
    Check("cudalibs.majors"),
    Check("coverage.kernels"),
    Check("gpu.available", gpu=True),
    Check("gpu.nvidia_smi", gpu=True),
    Check("gpu.device_arch", gpu=True),
    Check("tf32.policy"),
    Check("tf32.speedup", gpu=True),
    Check("tf32.accuracy", gpu=True),
    Check("amp.cuda_fp16", gpu=True),
    Check("amp.cuda_bf16", gpu=True),
    Check("amp.cpu_bf16"),
    Check("distributed.nccl", gpu=True),
    Check("distributed.gloo"),
    Check("te.import"),
    Check("te.fp8", gpu=True),
    Check("compile.toolchain"),
    Check("compile.cpu_function"),
    Check("compile.cpu_module"),
    Check("compile.cpu_max_autotune"),
    Check("compile.cuda_function", gpu=True),
    Check("compile.cuda_module", gpu=True),
    Check("release.openmp"),
    Check("release.cpu_isa"),
    Check("release.conv2d_cpu"),
    Check("release.linalg_cpu"),
    Check("release.numpy"),
    Check("release.cudnn_compile_version"),
    Check("release.cudnn_package"),
    Check("release.nccl_package"),
    Check("release.conv2d_cuda", gpu=True),
    Check("release.linalg_cuda", gpu=True),
    Check("release.cuda_errors", gpu=True),
    Check("release.gds_errors", gpu=True),
    Check("dev.cpp_extension"),
    Check("dev.nvcc"),
    Check("dev.jupyter"),
    Check("dev.sshd"),
    Check("vscode.version"),
    Check("vscode.serves"),
    Check("hpc.identity"),
    Check("hpc.home"),
    Check("hpc.host_env"),
    Check("hpc.torch_import"),
    Check("hpc.compile_caches"),
    Check("hpc.compile"),
    Check("hpc.cuda", gpu=True),
    Check("hpc.te"),
    Check("hpc.jupyter", only_from="dev"),
    Check("hpc.dev_tools", only_from="dev"),
    Check("perf.gemm_fp32", gpu=True),
    Check("perf.gemm_tf32", gpu=True),
    Check("perf.gemm_bf16", gpu=True),
    Check("perf.allreduce", gpu=True),
)
CHECK_BY_NAME = {c.name: c for c in CHECKS}


def section(name: str) -> Section:
    """The row of section `name`; KeyError names the valid ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown section {name!r}; valid: {', '.join(SECTIONS)}") from None


def sections_problem(names: tuple[str, ...] | list[str]) -> str | None:
    """Why `names` (a `--sections` value, split) selects no sections: none given, or a name no row has (with the
    choices); None when every name is a section. The one rule of the CLI, the runner and the suite."""
    unknown = [n for n in names if n not in BY_NAME] if names else ["(none given)"]
    return f"unknown section {', '.join(unknown)}; choices: {', '.join(SECTIONS)}" if unknown else None


def check_row(name: str) -> Check | None:
    """The table's row of the check `name` (as a probe reports it), or None when no row names it."""
    return CHECK_BY_NAME.get(name)


def applies(row: Section | Check, flavor: str) -> bool:
    """Does `row` apply to an image of `flavor` (every flavor at or above the row's)?"""
    return FLAVORS.index(flavor) >= FLAVORS.index(row.flavor)


def sections_for(flavor: str, where: str = IMAGE_USER, opt_in: bool = False) -> tuple[str, ...]:
    """The sections one probe run `where` covers for an image of `flavor` (opt-in ones only with `opt_in`)."""
    return tuple(s.name for s in TABLE if s.where == where and applies(s, flavor) and (opt_in or not s.opt_in))


def checks_for(flavor: str, opt_in: bool = False) -> tuple[Check, ...]:
    """The checks an image of `flavor` is tested for: one suite test each."""
    return tuple(c for c in CHECKS if applies(c, flavor) and (opt_in or not c.opt_in))


def as_json() -> list[dict]:
    """The sections as plain rows (`--list-sections`)."""
    return [asdict(s) for s in TABLE]


def checks_json() -> list[dict]:
    """The checks as plain rows (`--list-checks`), each with its section's flavor and place filled in."""
    return [{"name": c.name, "section": c.section, "flavor": c.flavor, "where": c.where, "gpu": c.gpu,
             "opt_in": c.opt_in} for c in CHECKS]
