"""Facts about the machine a container will run on, read from a root directory (so tests read recorded trees):
GPUs and MIG devices (nvidia-smi output or /proc/driver/nvidia), their PCI bus IDs, NUMA nodes and local CPUs
(sysfs), and the memory size (/proc/meminfo). Imports nothing of docker and no other stage.

    topo = read_topology(Path("/"), **nvidia_smi_outputs())
    topo.gpus[0].numa_node, topo.gpus[0].local_cpus, topo.nodes
"""

from imagebuild.host.fabric import Fabric, Hca, Port, read_fabric
from imagebuild.host.memory import mem_total_bytes
from imagebuild.host.nvsmi import host_root, nvidia_smi_outputs
from imagebuild.host.topology import Gpu, MigDevice, Topology, format_cpulist, parse_cpulist, read_topology

__all__ = ["Fabric", "Gpu", "Hca", "MigDevice", "Port", "Topology", "format_cpulist", "host_root", "mem_total_bytes",
           "nvidia_smi_outputs", "parse_cpulist", "read_fabric", "read_topology"]
