"""The host's RDMA fabric, read under a root directory: every HCA in sys/class/infiniband with its ports (state,
link layer, rate), its PCI address and NUMA node, and for RoCE ports the GID index of the first RoCE v2 GID.

This is what NCCL needs to be told on a cluster: which HCAs and ports to use (`NCCL_IB_HCA`), and on RoCE which GID
index (`NCCL_IB_GID_INDEX`); an Ethernet-only host has no active RDMA port and NCCL falls back to sockets.

Where each fact comes from (under `root`): sys/class/infiniband/<hca>/ports/<n>/{state,link_layer,rate}, the
HCA's PCI address from <hca>/device/uevent (PCI_SLOT_NAME; `device` is a link to the PCI device on a live host), its
NUMA node from sys/bus/pci/devices/<address>/numa_node, and RoCE GIDs from ports/<n>/gid_attrs/types/<i> with
ports/<n>/gids/<i>.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


@dataclass(frozen=True)
class Port:
    number: int
    active: bool  # state "4: ACTIVE"
    link_layer: str  # "InfiniBand" | "Ethernet" (RoCE)
    rate: str  # "400 Gb/sec (4X NDR)"
    roce_v2_gid_index: int | None = None


@dataclass(frozen=True)
class Hca:
    name: str  # mlx5_0
    bus_id: str | None
    numa_node: int | None
    ports: tuple[Port, ...]


@dataclass(frozen=True)
class Fabric:
    hcas: tuple[Hca, ...] = ()

    def active(self, link_layer: str) -> list[tuple[Hca, Port]]:
        return [(h, p) for h in self.hcas for p in h.ports if p.active and p.link_layer == link_layer]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _roce_v2_index(port_dir: Path) -> int | None:
    types = port_dir / "gid_attrs" / "types"
    indexes = sorted(int(p.name) for p in types.glob("[0-9]*") if p.name.isdigit()) if types.is_dir() else []
    for i in indexes:
        kind = (_read(types / str(i)) or "").lower()
        gid = _read(port_dir / "gids" / str(i)) or ZERO_GID
        if kind == "roce v2" and gid != ZERO_GID:
            return i
    return None


def _bus_id(hca_dir: Path) -> str | None:
    for line in (_read(hca_dir / "device" / "uevent") or "").splitlines():
        key, _, value = line.partition("=")
        if key == "PCI_SLOT_NAME" and value:
            return value.strip().lower()
    return None


def read_fabric(root: Path = Path("/")) -> Fabric:
    base = root / "sys" / "class" / "infiniband"
    hcas = []
    for hca_dir in sorted(base.iterdir() if base.is_dir() else []):
        ports = []
        for port_dir in sorted((hca_dir / "ports").glob("[0-9]*"), key=lambda p: int(p.name)):
            state = _read(port_dir / "state") or ""
            layer = _read(port_dir / "link_layer") or "InfiniBand"
            ports.append(Port(number=int(port_dir.name), active="ACTIVE" in state.upper(), link_layer=layer,
                              rate=_read(port_dir / "rate") or "",
                              roce_v2_gid_index=_roce_v2_index(port_dir) if layer == "Ethernet" else None))
        bus = _bus_id(hca_dir)
        node_text = _read(root / "sys" / "bus" / "pci" / "devices" / bus / "numa_node") if bus else None
        node = int(node_text) if node_text and node_text.lstrip("-").isdigit() and int(node_text) >= 0 else None
        hcas.append(Hca(name=hca_dir.name, bus_id=bus, numa_node=node, ports=tuple(ports)))
    return Fabric(tuple(hcas))
