"""Recorded host trees (tests/unit/fixtures/hosts/<name>/) as host.Topology, with their recorded nvidia-smi outputs."""

from __future__ import annotations

from pathlib import Path

from imagebuild.host import Topology, nvidia_smi_outputs, read_topology

HOSTS = Path(__file__).parent / "fixtures" / "hosts"


def topo_of(name: str, smi: bool = True) -> Topology:
    root = HOSTS / name
    if not smi:
        return read_topology(root)
    return read_topology(root, **nvidia_smi_outputs(root))
