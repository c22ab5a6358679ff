"""A container of the image started the way Slurm's container runtimes start it, for the suite's hpc checks
(smoke/suite/test_hpc_runtime.py, probe/hpcruntime.py):

- as the calling user: a UID/GID the image has no passwd or group entry for, in no group 0 (enroot and Apptainer
  ignore the image's USER and never add group 0, unlike OpenShift's `--user N:0`, which the uid checks cover);
- a read-only root filesystem (Apptainer's default for a .sif), with /tmp writable as on a cluster node;
- HOME bind-mounted from outside and empty (here a tmpfs owned by that user), USER set as the host's login sets it;
- the host's environment passed in: PYTHONPATH, LD_LIBRARY_PATH, CUDA_HOME and PIP_* set to paths and values a login
  node's modules leave, none of which exist in the image.

The launch settings are engine/containers.py's (GPUs, /dev/shm, ulimits, no network); only the user, environment,
read-only root and the two tmpfs mounts are added here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from imagebuild.engine.containers import ContainerSettings, start

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

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


def start_hpc(client: EngineClient, image: str, name: str, gpus: bool,
              labels: dict[str, str] | None = None) -> tuple[Any, str | None, str, dict[str, Any]]:
    """Start the hpc-mode container: (container or None, error or None, "UID:GID", notes of the start)."""
    extra: dict[str, Any] = {}
    container, error = start(client, hpc_kwargs(hpc_settings(image, name, gpus, labels)), extra)
    return container, error, f"{HPC_UID}:{HPC_GID}", extra
