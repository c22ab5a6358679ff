"""The Docker engine: the one connection (timeouts by purpose), the image store every stage asks about images, the
one reader of the engine's JSON streams, and the container launch settings every stage shares. Nothing else in the
package talks to the engine API (tests/unit/test_import_rules.py).

    client = connect("push")
    store = as_store(client)
    store.image_id("ml/pytorch:2.9-runtime")                 # None: not in the engine
    settings = ContainerSettings(image=ref, name="x", gpus=host_has_gpus(client))
"""

from imagebuild.engine.connect import TIMEOUTS, Purpose, connect, describe_host, local_root_dir
from imagebuild.engine.containers import SHM_SIZE, STACK_BYTES, ContainerSettings, host_has_gpus
from imagebuild.engine.store import DockerImageStore, ImageStore, as_store
from imagebuild.engine.stream import EngineError, EngineStreamError

__all__ = ["SHM_SIZE", "STACK_BYTES", "TIMEOUTS", "ContainerSettings", "DockerImageStore", "EngineError",
           "EngineStreamError", "ImageStore", "Purpose", "as_store", "connect", "describe_host", "host_has_gpus",
           "local_root_dir"]
