"""Side containers: the image started another way next to the suite's main container, one row each, for the probe
sections of that place (probe/table.py: where = arbitrary-uid, hpc). The runner starts every row whose place has a
section for the image's flavor, names each to the suite (`--side PLACE=NAME`, or `--side-error PLACE=WHY` when it
did not start) and removes them with the main container; the suite reads the user each runs as from the container.

- arbitrary-uid: OpenShift's restricted policy runs images as a random UID in group 0, without a passwd entry
  (`--user 12345:0`); no GPUs (its checks need none).
- hpc: as Slurm's container runtimes (enroot/pyxis, Apptainer) start an image:
  - as the calling user: a UID/GID the image has no passwd or group entry for, in no group 0 (enroot and Apptainer
    ignore the image's USER and never add group 0, unlike OpenShift's `--user N:0`);
  - a read-only root filesystem (Apptainer's default for a .sif), with /tmp writable as on a cluster node;
  - HOME bind-mounted from outside and empty (here a tmpfs owned by that user), USER set as the host's login sets it;
  - the host's environment passed in: PYTHONPATH, LD_LIBRARY_PATH, CUDA_HOME and PIP_* set to paths and values a
    login node's modules leave, none of which exist in the image.

The launch settings are engine/containers.py's (GPUs, /dev/shm, ulimits, no network); a row adds only what differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from imagebuild.engine.containers import ContainerSettings, start
from imagebuild.smoke.probe import table as probe_table

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

ARBITRARY_USER = "12345:0"
HPC_UID = HPC_GID = 23456
HPC_USER = "researcher"
HPC_HOME = f"/home/{HPC_USER}"
HOSTILE_ENV = {
    "PYTHONPATH": "/cm/shared/apps/python/3.9/lib/python3.9/site-packages",
    "LD_LIBRARY_PATH": "/cm/shared/apps/cuda11.2/lib64:/opt/nonsense/lib",
    "CUDA_HOME": "/usr/local/cuda-11.2-nonsense",
    "PIP_INDEX_URL": "http://pip.invalid/simple",
    "PIP_REQUIRE_VIRTUALENV": "true",
    "PIP_CONFIG_FILE": "/nonexistent/pip.conf",
}


def hpc_settings(image: str, name: str, gpus: bool, labels: dict[str, str] | None = None) -> ContainerSettings:
    return ContainerSettings(
        image=image, name=name, gpus=gpus, labels=dict(labels or {}), user=f"{HPC_UID}:{HPC_GID}",
        environment={**HOSTILE_ENV, "HOME": HPC_HOME, "USER": HPC_USER, "LOGNAME": HPC_USER},
    )


def hpc_kwargs(settings: ContainerSettings) -> dict[str, Any]:
    """`client.containers.create` arguments: the shared settings plus a read-only root and writable /tmp and HOME."""
    kw = settings.kwargs()
    kw["read_only"] = True
    # exec: Docker's tmpfs default is noexec, a cluster's /tmp and HOME are not (Inductor loads the .so files it
    # builds from its cache under /tmp)
    kw["tmpfs"] = {"/tmp": "rw,exec,nosuid,nodev,mode=1777",
                   HPC_HOME: f"rw,exec,nosuid,nodev,mode=0700,uid={HPC_UID},gid={HPC_GID}"}
    return kw


def _arbitrary_uid_kwargs(main: ContainerSettings, name: str) -> dict[str, Any]:
    return replace(main, name=name, user=ARBITRARY_USER, gpus=False).kwargs()


def _hpc_kwargs(main: ContainerSettings, name: str) -> dict[str, Any]:
    """On the main container's platform and emulated CPU (an arm64 image on an amd64 engine runs its hpc side under
    QEMU too), under the login node's hostile environment."""
    own = hpc_settings(main.image, name, main.gpus, dict(main.labels))
    return hpc_kwargs(replace(own, platform=main.platform, environment={**main.environment, **own.environment}))


@dataclass(frozen=True)
class SideContainer:
    where: str  # the probe place (probe/table.py) whose sections run in it
    suffix: str  # its container's name: <main container's name>-<suffix>
    how: str  # how it starts the image, for the reason its checks fail with when it does not start
    kwargs: Callable[[ContainerSettings, str], dict[str, Any]]  # (main container's settings, name) -> create args


SIDES = (
    SideContainer(probe_table.ARBITRARY_UID, "uid", f"as {ARBITRARY_USER} (an arbitrary UID in group 0)",
                  _arbitrary_uid_kwargs),
    SideContainer(probe_table.HPC, "hpc", f"the enroot/Apptainer way (as {HPC_UID}:{HPC_GID}, read-only root)",
                  _hpc_kwargs),
)


def for_flavor(flavor: str | None, sections: tuple[str, ...] | None = None) -> tuple[SideContainer, ...]:
    """The side containers an image of `flavor` needs: those whose place has a section for it (of `sections`, when
    a run covers only those). An image whose flavor is not known (no io.imagebuild.flavor label, no --flavor) gets
    those whose sections apply to every flavor; the others' checks skip, saying so."""
    lowest = flavor or probe_table.FLAVORS[0]
    return tuple(s for s in SIDES if any(sections is None or name in sections
                                         for name in probe_table.sections_for(lowest, s.where)))


def sections_problem(names: tuple[str, ...]) -> str | None:
    """Why `names` selects no probe sections (`--sections`), None when it does: the probe table's rule."""
    problem: str | None = probe_table.sections_problem(names)
    return problem


def start_side(client: EngineClient, side: SideContainer, main: ContainerSettings) -> tuple[Any, str, str | None]:
    """Start `side` next to the main container: (the SDK's container or None, its name, why it is not running or
    None). A container that exits at once is returned too (to be removed) with the reason. The engine's retries
    (a refused ulimit, no GPU runtime) are the main container's notes already: not noted again."""
    name = f"{main.name}-{side.suffix}"[:128]
    container, err = start(client, side.kwargs(main, name), {})
    if container is None:
        return None, name, f"the image did not start {side.how}: {err}"
    container.reload()
    if container.status == "running":
        return container, name, None
    logs = container.logs(tail=20).decode(errors="replace").strip()
    return container, name, (f"the image exited right after its start {side.how} (exit "
                             f"{(container.attrs.get('State') or {}).get('ExitCode')}, {logs[-800:] or 'no output'})")
