"""`imagebuild slurm` on the recorded host trees: pyxis flags, one task per GPU bound to its NUMA node, NCCL on the
InfiniBand ports the tree lists (h100-2s8g: mlx5_0/mlx5_1, 400 Gb/s NDR), sockets without RDMA, RoCE's GID index."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _hosts import HOSTS, topo_of

from imagebuild.errors import UsageError
from imagebuild.host import Fabric, read_fabric
from imagebuild.launch.slurm import SlurmRequest, make_slurm, nccl_environment
from imagebuild.oci.pyxis import container_image_flag, pyxis_image


def test_pyxis_form_splits_the_registry_with_a_hash():
    assert pyxis_image("127.0.0.1:5000/ml/pytorch-cpu:2.13-cpu-runtime") == "127.0.0.1:5000#ml/pytorch-cpu:2.13-cpu-runtime"
    assert pyxis_image("nvcr.io/nvidia/pytorch:24.10-py3") == "nvcr.io#nvidia/pytorch:24.10-py3"
    assert pyxis_image("ubuntu:24.04") == "ubuntu:24.04"
    assert pyxis_image("docker.io/library/ubuntu:24.04") == "ubuntu:24.04"
    assert pyxis_image("reg.example/a@sha256:" + "0" * 64) == "reg.example#a@sha256:" + "0" * 64
    assert container_image_flag("/lustre/img.sqsh") == "--container-image=/lustre/img.sqsh"


def test_fabric_of_the_recorded_dgx_tree():
    fabric = read_fabric(HOSTS / "h100-2s8g")
    assert [(h.name, h.bus_id, h.numa_node) for h in fabric.hcas] == [("mlx5_0", "0000:1a:00.0", 0),
                                                                      ("mlx5_1", "0000:9c:00.0", 1)]
    assert [p.rate for _, p in fabric.active("InfiniBand")] == ["400 Gb/sec (4X NDR)"] * 2
    assert read_fabric(HOSTS / "h100nvl-1s2g") == Fabric()


def test_eight_gpu_two_socket_node():
    lines = make_slurm(SlurmRequest(image="reg.example:5000/ml/pt:2.13-runtime", command=("python", "train.py"),
                                    nodes=4, workspace="/home/u/proj", mounts=("/lustre/data:/data:ro",)),
                       topo_of("h100-2s8g"), read_fabric(HOSTS / "h100-2s8g"))
    assert lines.env == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}
    srun = lines.srun
    for flag in ("--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8", "--cpus-per-task=28",
                 "--cpu-bind=map_ldom:0,0,0,0,1,1,1,1", "--mem-bind=map_ldom:0,0,0,0,1,1,1,1",
                 "--container-image=reg.example:5000#ml/pt:2.13-runtime",
                 "--container-mounts=/home/u/proj:/workspace,/lustre/data:/data:ro", "--container-workdir=/workspace"):
        assert flag in srun, flag
    script = lines.sbatch_text()
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=pytorch\n#SBATCH --nodes=4\n")
    assert "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1\n" in script and "MASTER_ADDR=" in script
    assert "LOCAL_RANK=$SLURM_LOCALID exec python train.py" in script
    out = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_one_socket_node_without_rdma():
    lines = make_slurm(SlurmRequest(image="/shared/pt.sqsh"), topo_of("h100nvl-1s2g"), Fabric())
    assert lines.env == {"NCCL_IB_DISABLE": "1"}
    assert not [a for a in lines.srun if a.startswith(("--cpu-bind", "--mem-bind"))]
    assert any("NCCL over TCP sockets" in n for n in lines.notes)
    assert lines.srun_text(standalone=True).startswith("NCCL_IB_DISABLE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500")


def test_roce_ports_get_their_gid_index(tmp_path):
    port = tmp_path / "sys/class/infiniband/mlx5_2/ports/1"
    (port / "gid_attrs/types").mkdir(parents=True)
    (port / "gids").mkdir()
    (port / "state").write_text("4: ACTIVE\n")
    (port / "link_layer").write_text("Ethernet\n")
    for i, (kind, gid) in enumerate((("IB/RoCE v1", "fe80:0000:0000:0000:0000:0000:0000:0001"),
                                     ("RoCE v2", "0000:0000:0000:0000:0000:0000:0000:0000"),
                                     ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0001"))):
        (port / "gid_attrs/types" / str(i)).write_text(kind + "\n")
        (port / "gids" / str(i)).write_text(gid + "\n")
    env, notes = nccl_environment(read_fabric(tmp_path))
    assert env == {"NCCL_IB_HCA": "=mlx5_2:1", "NCCL_IB_GID_INDEX": "2"} and "RoCE" in notes[0]
    (port / "state").write_text("1: DOWN\n")
    env, notes = nccl_environment(read_fabric(tmp_path))
    assert env == {"NCCL_IB_DISABLE": "1"} and "mlx5_2 have no active port" in notes[0]


def test_bad_requests_are_usage_errors():
    topo = topo_of("h100-2s8g")
    with pytest.raises(UsageError, match="valid choices: 0-8"):
        make_slurm(SlurmRequest(image="x:1", gpus_per_node=9), topo, Fabric())
    with pytest.raises(UsageError, match="SRC:DST"):
        make_slurm(SlurmRequest(image="x:1", mounts=("/data",)), topo, Fabric())


def test_cli_prints_the_script_for_a_recorded_host():
    res = subprocess.run([sys.executable, "-m", "imagebuild", "slurm", "--host-root", str(HOSTS / "h100-2s8g"),
                          "--no-workspace", "reg.example/ml/pt:1", "--", "python", "-c", "import torch"],
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert res.returncode == 0, res.stderr
    assert "--container-image=reg.example#ml/pt:1" in res.stdout and "--container-mounts" not in res.stdout
    assert "fabric: InfiniBand, 2 active port(s)" in res.stderr
