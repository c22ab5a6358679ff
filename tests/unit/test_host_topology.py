"""host/: GPUs, MIG devices, NUMA nodes and memory read from recorded host trees (tests/unit/fixtures/hosts/):

- h100-2s8g: DGX H100 layout, 2x Xeon 8480C (2 x 56 cores, HT), 8x H100 SXM on buses 18/2a/3a/5d | 9a/ab/ba/db
- h100nvl-1s2g: 1 socket EPYC 9454P (NPS1, one node), 2x H100 NVL
- h100-mig: 2x Xeon 6448Y, 2x H100 PCIe, GPU 0 MIG-partitioned (3g.40gb, 2g.20gb, 2x 1g.10gb)
Each tree has sys/bus/pci/devices/<bus>/{numa_node,local_cpulist,...}, sys/devices/system/node/node<N>/cpulist,
proc/driver/nvidia/gpus/<bus>/information, proc/meminfo and the recorded nvidia-smi outputs in nvidia-smi/.
"""

from __future__ import annotations

import pytest
from _hosts import HOSTS, topo_of

from imagebuild.host import format_cpulist, mem_total_bytes, parse_cpulist, read_topology
from imagebuild.host.topology import normalize_bus_id, parse_smi_list


def test_cpulists_round_trip():
    assert parse_cpulist("0-55,112-167") == set(range(56)) | set(range(112, 168))
    assert parse_cpulist("3") == {3} and parse_cpulist("") == set() and parse_cpulist("0-1,5\n") == {0, 1, 5}
    assert format_cpulist(set(range(56)) | set(range(112, 168))) == "0-55,112-167"
    assert format_cpulist({0, 2, 3, 4, 7}) == "0,2-4,7"


def test_bus_ids_map_to_the_sysfs_form():
    assert normalize_bus_id("00000000:9A:00.0") == "0000:9a:00.0"
    assert normalize_bus_id("0000:18:00.0") == "0000:18:00.0"
    assert normalize_bus_id("18:00.0") == "0000:18:00.0"


def test_two_socket_eight_gpu_server():
    topo = topo_of("h100-2s8g")
    assert topo.source == "nvidia-smi"
    assert topo.nodes == {0: "0-55,112-167", 1: "56-111,168-223"}
    assert [g.index for g in topo.gpus] == list(range(8))
    assert [g.bus_id for g in topo.gpus] == ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                             "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.gpus[5].local_cpus == "56-111,168-223" and topo.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert all(g.uuid.startswith("GPU-") and not g.mig for g in topo.gpus)
    assert mem_total_bytes(HOSTS / "h100-2s8g") == 2113389776 * 1024


def test_proc_fallback_gives_the_same_gpus():
    """Without nvidia-smi the driver's /proc files give the same GPUs, in PCI bus order (nvidia-smi's)."""
    with_smi, without = topo_of("h100-2s8g"), topo_of("h100-2s8g", smi=False)
    assert without.source == "/proc/driver/nvidia"
    assert [(g.index, g.uuid, g.bus_id, g.numa_node) for g in without.gpus] == \
        [(g.index, g.uuid, g.bus_id, g.numa_node) for g in with_smi.gpus]


def test_one_socket_server():
    topo = topo_of("h100nvl-1s2g")
    assert topo.nodes == {0: "0-95"}
    assert [(g.bus_id, g.numa_node, g.local_cpus) for g in topo.gpus] == [("0000:41:00.0", 0, "0-95"),
                                                                          ("0000:c1:00.0", 0, "0-95")]


def test_mig_partitioned_gpu():
    topo = topo_of("h100-mig")
    gpu0, gpu1 = topo.gpus
    assert [(m.profile, m.device) for m in gpu0.mig] == [("3g.40gb", 0), ("2g.20gb", 1), ("1g.10gb", 2),
                                                         ("1g.10gb", 3)]
    assert all(m.uuid.startswith("MIG-") for m in gpu0.mig) and gpu1.mig == ()
    assert (gpu0.numa_node, gpu0.local_cpus) == (0, "0-31,64-95")
    assert (gpu1.numa_node, gpu1.local_cpus) == (1, "32-63,96-127")


def test_smi_list_of_older_drivers_with_slash_mig_ids():
    """Drivers before R470 printed MIG-GPU-<uuid>/<gi>/<ci>: still read as the GPU's MIG devices."""
    text = ("GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
            "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0)\n")
    listed = parse_smi_list(text)
    assert listed[0][1] == "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
    assert [m.uuid for m in listed[0][2]] == ["MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0"]


@pytest.mark.parametrize("value", ["-1", ""])
def test_unreported_numa_node(tmp_path, value):
    import shutil

    root = tmp_path / "host"
    shutil.copytree(HOSTS / "h100-2s8g", root)
    (root / "sys/bus/pci/devices/0000:18:00.0/numa_node").write_text(value + "\n")
    topo = read_topology(root)
    assert topo.gpus[0].numa_node is None and topo.gpus[1].numa_node == 0


def test_a_host_without_gpus(tmp_path):
    topo = read_topology(tmp_path)
    assert topo.gpus == () and topo.source == "none" and topo.nodes == {}
    assert mem_total_bytes(tmp_path) is None
