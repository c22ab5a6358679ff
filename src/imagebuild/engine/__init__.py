"""The Docker engine: the one connection (timeouts by purpose) and the container launch settings every stage
shares. Nothing else in the package calls `docker.from_env`.

    client = connect("push")
    settings = ContainerSettings(image=ref, name="x", gpus=host_has_gpus(client))
"""

from imagebuild.engine.connect import TIMEOUTS, Purpose, connect, describe_host, local_root_dir
from imagebuild.engine.containers import SHM_SIZE, STACK_BYTES, ContainerSettings, host_has_gpus

__all__ = ["SHM_SIZE", "STACK_BYTES", "TIMEOUTS", "ContainerSettings", "Purpose", "connect", "describe_host",
           "host_has_gpus", "local_root_dir"]
