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

import re
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
    skipped: tuple[str, ...] = ()  # entries of sys/class/infiniband whose names no HCA has (ascii() of each)

    def active(self, link_layer: str) -> list[tuple[Hca, Port]]:
        return [(h, p) for h in self.hcas for p in h.ports if p.active and p.link_layer == link_layer]


# the names the kernel gives HCAs (mlx5_0, ibp12s0, rocep1s0f0, bnxt_re0, irdma1): what NCCL_IB_HCA can name; a
# recorded tree with anything else (a newline, bytes that are not UTF-8) is read without it, and says so
_HCA_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):  # unreadable, or a path the OS cannot take (an embedded NUL)
        return None


def _port_dirs(hca_dir: Path) -> list[Path]:
    """ports/<n>, numerically; an entry that is not a number is not a port."""
    found = [p for p in (hca_dir / "ports").glob("[0-9]*") if p.name.isascii() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def _roce_v2_index(port_dir: Path) -> int | None:
    types = port_dir / "gid_attrs" / "types"
    indexes = sorted(int(p.name) for p in types.glob("[0-9]*") if p.name.isascii() and p.name.isdigit()) \
        if types.is_dir() else []
    for i in indexes:
        kind = (_read(types / str(i)) or "").lower()
        gid = _read(port_dir / "gids" / str(i)) or ZERO_GID
        if kind == "roce v2" and gid != ZERO_GID:
            return i
    return None


_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def _bus_id(hca_dir: Path) -> str | None:
    """PCI_SLOT_NAME of the HCA's uevent, when it is a PCI address (it becomes a path under sys/bus/pci/devices)."""
    for line in (_read(hca_dir / "device" / "uevent") or "").splitlines():
        key, _, value = line.partition("=")
        if key == "PCI_SLOT_NAME" and _BUS_ID.fullmatch(value.strip().lower()):
            return value.strip().lower()
    return None


def read_fabric(root: Path = Path("/")) -> Fabric:
    base = root / "sys" / "class" / "infiniband"
    hcas, skipped = [], []
    for hca_dir in sorted(base.iterdir() if base.is_dir() else []):
        if not _HCA_NAME.fullmatch(hca_dir.name):
            skipped.append(ascii(hca_dir.name))
            continue
        ports = []
        for port_dir in _port_dirs(hca_dir):
            state = _read(port_dir / "state") or ""
            layer = _read(port_dir / "link_layer") or "InfiniBand"
            ports.append(Port(number=int(port_dir.name), active="ACTIVE" in state.upper(), link_layer=layer,
                              rate=_read(port_dir / "rate") or "",
                              roce_v2_gid_index=_roce_v2_index(port_dir) if layer == "Ethernet" else None))
        bus = _bus_id(hca_dir)
        node_text = _read(root / "sys" / "bus" / "pci" / "devices" / bus / "numa_node") if bus else None
        node = int(node_text) if node_text and node_text.lstrip("-").isdigit() and int(node_text) >= 0 else None
        hcas.append(Hca(name=hca_dir.name, bus_id=bus, numa_node=node, ports=tuple(ports)))
    return Fabric(tuple(hcas), tuple(skipped))
