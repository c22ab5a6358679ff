"""`imagebuild run`: start an image the way its users should run it: GPUs (all, indexes, GPU or MIG UUIDs), a
/dev/shm sized from host memory or the host's IPC namespace, memlock/stack ulimits, NUMA pinning to the selected
GPUs' node, the current directory at /workspace with the caller's UID/GID, a terminal when there is one, Jupyter or
sshd on 127.0.0.1 for dev images; always removed on exit.

    gpus.py     --gpus against the host's GPU list (host.read_topology)
    numa.py     --cpuset-cpus/--cpuset-mems for GPUs that share a NUMA node
    devaccess.py  Jupyter token / ssh keys / ports
    image.py    the image: a reference the engine has, or a plan row (its image ID from the matrix record)
    spec.py     options + image + host facts -> ContainerSettings (all checks before any container exists)
    session.py  run it in the foreground and remove it
"""
