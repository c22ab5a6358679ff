"""The one table of in-image checks. Each row is a probe section: the module that runs it, the lowest image flavor
it applies to, and where it runs. The probe's dispatch (`--sections`, `--child`) and the suite's selection (which
sections each flavor's main probe runs, which run apart as root or as an arbitrary UID, which test files apply to a
flavor) are all read from here, so a check's flavor is stated once.

Adding a check: its probe module (a `run(probe)`, plus `child(probe)` when part of it runs in a child probe), its
suite test file (`pytestmark = pytest.mark.section("NAME")`) and one row below.

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
ARBITRARY_UID = "arbitrary-uid"  # a second container of the image started as --user 12345:0 (OpenShift's policy)
# a third container started as enroot/pyxis and Apptainer start images on Slurm clusters: an unknown UID/GID (no
# group 0), no USER, a read-only root, an empty HOME from outside, a hostile host environment (smoke/hpcrun.py)
HPC = "hpc"
WHERE = (IMAGE_USER, ROOT, ARBITRARY_UID, HPC)


@dataclass(frozen=True)
class Section:
    name: str  # the section (`--sections NAME`), the prefix of its checks' names (`NAME.check`)
    module: str  # probe.<module> holds run(probe) (and child(probe) when `child`)
    flavor: str  # the lowest flavor it applies to
    where: str = IMAGE_USER
    child: bool = False  # part of its work runs in a child probe (`--child NAME`): a crash there cannot end the probe
    opt_in: bool = False  # only when asked for (`--perf`): needs time or hardware a smoke run does not assume


# The order is the run order within one probe: hygiene right after system, before later sections (compile caches,
# child probes) write to /tmp when everything runs in one process (`python probe.pyz` by hand).
TABLE = (
    Section("system", "system", "base"),
    Section("hygiene", "hygiene", "base", ROOT),
    Section("locale", "locales", "base"),
    Section("pip", "pipcheck", "base"),
    Section("ldd", "sharedlibs", "base"),
    Section("uid", "uid", "base", ARBITRARY_UID),
    Section("versions", "versions", "base"),
    Section("libraries", "libraries", "base"),
    Section("gpu", "gpu", "runtime"),
    Section("tf32", "tf32", "runtime"),
    Section("amp", "amp", "runtime"),
    Section("distributed", "distributed", "runtime"),
    Section("te", "te", "runtime", child=True),
    Section("compile", "torch_compile", "runtime", child=True),
    Section("release", "release", "runtime", child=True),
    Section("dev", "dev", "dev"),
    Section("hpc", "hpcruntime", "runtime", HPC),
    Section("perf", "perf", "runtime", opt_in=True),
)
BY_NAME = {s.name: s for s in TABLE}
SECTIONS = tuple(s.name for s in TABLE)
# a probe run without --sections: what applies to every flavor below dev and needs no opt-in
DEFAULT_SECTIONS = tuple(s.name for s in TABLE if s.flavor != "dev" and not s.opt_in)


def section(name: str) -> Section:
    """The row of section `name`; KeyError names the valid ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown section {name!r}; valid: {', '.join(SECTIONS)}") from None


def applies(row: Section, flavor: str) -> bool:
    """Does `row` apply to an image of `flavor` (every flavor at or above the row's)?"""
    return FLAVORS.index(flavor) >= FLAVORS.index(row.flavor)


def sections_for(flavor: str, where: str = IMAGE_USER, opt_in: bool = False) -> tuple[str, ...]:
    """The sections one probe run `where` covers for an image of `flavor` (opt-in ones only with `opt_in`)."""
    return tuple(s.name for s in TABLE if s.where == where and applies(s, flavor) and (opt_in or not s.opt_in))


def as_json() -> list[dict]:
    """The table as plain rows (`--list-sections`)."""
    return [asdict(s) for s in TABLE]
