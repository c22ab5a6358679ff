"""The gpu section's usable-GPU branch (probe/gpu.py) without a GPU: the fake CUDA torch (_fake_cuda_torch.py) with
one and several devices, the device arch against torch's arch list, and `nvidia-smi -L` (GPUs and MIG devices) from
a fake nvidia-smi first on PATH. The section once crashed on its first real GPU (it rebound the probe object `p` to
the device properties in its device loop): every run here goes through Probe.run, which reports such a crash as a
failed `gpu.probe` check. The last test checks the fake's names against the real CPU torch."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from _fake_cuda_torch import (
    A100,
    API,
    ARCH_FLAGS,
    CUDA_BUILD_API,
    H100,
    H200,
    H200_MIG,
    L4,
    PROPERTIES,
    fake_cuda_torch,
)

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import gpu

UUID = "GPU-aa11bb22-cc33-dd44-ee55-ff66778899{:02d}"
MIG_UUID = "MIG-00000000-1111-2222-3333-4444444444{:02d}"


def _smi_list(*gpus: str, mig: tuple[str, ...] = ()) -> str:
    """`nvidia-smi -L` as the driver prints it; `mig`: the MIG profiles of GPU 0."""
    lines = []
    for i, name in enumerate(gpus):
        lines.append(f"GPU {i}: {name} (UUID: {UUID.format(i)})")
        if i == 0:
            lines += [f"  MIG {prof:<11} Device {k:>2}: (UUID: {MIG_UUID.format(k)})" for k, prof in enumerate(mig)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """Put a fake `nvidia-smi` first on PATH: smi(listing, rc=0, stderr="") sets what `-L` prints."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def make(listing: str, rc: int = 0, stderr: str = "") -> None:
        (tmp_path / "listing").write_text(listing)
        (tmp_path / "stderr").write_text(stderr)
        script.write_text("#!/bin/sh\n"
                          f"if [ \"$1\" = -L ]; then cat '{tmp_path / 'listing'}'; cat '{tmp_path / 'stderr'}' >&2; "
                          f"exit {rc}; fi\n"
                          "echo 570.86.15\n")
        script.chmod(0o755)

    return make


def _run(torch) -> tuple[P.Probe, dict]:
    p = P.Probe(["gpu"])
    p.torch = torch
    p._gpu = (True, "")
    p.run({"gpu": gpu.run})
    return p, {c["name"]: c for c in p.doc["checks"]}


def test_one_gpu(smi):
    smi(_smi_list("NVIDIA H200"))
    p, c = _run(fake_cuda_torch([H200]))
    assert "gpu.probe" not in c and p.doc["probe"]["errors"] == []
    g = p.doc["gpu"]  # written on the probe object: the device loop no longer rebinds `p`
    assert g["available"] is True and g["count"] == 1
    assert g["devices"] == [{"index": 0, "name": "NVIDIA H200", "capability": "9.0", "sm": "sm_90",
                             "memory_bytes": H200.total_memory, "multiprocessors": 132}]
    assert g["arch_list"] == sorted(ARCH_FLAGS.split()) and g["arch_list_runtime"] == ARCH_FLAGS.split()
    assert g["driver"] == "570.86.15"
    assert c["gpu.available"]["status"] == "passed" and c["gpu.available"]["reason"] == "1 GPU(s): NVIDIA H200 (sm_90)"
    assert c["gpu.nvidia_smi"]["status"] == "passed" and c["gpu.nvidia_smi"]["reason"] == "1 GPU(s), 0 MIG device(s)"
    assert c["gpu.nvidia_smi"]["figures"]["gpus"][0]["uuid"] == UUID.format(0)
    assert c["gpu.device_arch"]["status"] == "passed" and c["gpu.device_arch"]["figures"]["archs"] == ["sm_90"]


def test_several_gpus_are_each_named(smi):
    smi(_smi_list("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"))
    p, c = _run(fake_cuda_torch([H100, H100, A100]))
    assert "gpu.probe" not in c and p.doc["gpu"]["count"] == 3
    assert [(d["index"], d["name"], d["sm"]) for d in p.doc["gpu"]["devices"]] == [
        (0, "NVIDIA H100 80GB HBM3", "sm_90"), (1, "NVIDIA H100 80GB HBM3", "sm_90"), (2, "NVIDIA A100-SXM4-80GB", "sm_80")]
    assert c["gpu.available"]["reason"] == ("3 GPU(s): NVIDIA H100 80GB HBM3 (sm_90), NVIDIA H100 80GB HBM3 (sm_90), "
                                            "NVIDIA A100-SXM4-80GB (sm_80)")
    assert c["gpu.available"]["figures"]["count"] == 3
    assert c["gpu.nvidia_smi"]["reason"] == "3 GPU(s), 0 MIG device(s)"
    assert c["gpu.device_arch"]["status"] == "passed"
    assert c["gpu.device_arch"]["figures"]["archs"] == ["sm_90", "sm_90", "sm_80"]


@pytest.mark.parametrize("devices, flags, missing", [
    ([H200], "sm_80 sm_86 sm_90", None),
    ([H200], "sm_75 sm_80 sm_86", "sm_90"),  # a cu118-era list: no Hopper code
    ([H200], "sm_80 compute_90", None),  # PTX for the device's own arch
    ([H200], "sm_80 compute_86", None),  # older PTX: JIT-compiled for a newer GPU
    ([H200], "sm_80 sm_90a", None),  # arch-specific code runs on its own arch
    ([L4], ARCH_FLAGS, None),  # sm_89 runs the wheels' sm_86 code (no sm_89 in torch's lists)
    ([L4], "sm_80 sm_90a", None),  # ... and sm_80's
    ([A100], "sm_86 sm_90", "sm_80"),  # sm_86 code does not run on an older minor
    ([L4], "sm_75 sm_90a", "sm_89"),  # sm_90a only on sm_90
    ([H200, A100, L4], "sm_90", "sm_80, sm_89"),  # each device that lacks code is named
])
def test_device_arch_against_torchs_arch_list(smi, devices, flags, missing):
    smi(_smi_list(*(d.name for d in devices)))
    _, c = _run(fake_cuda_torch(devices, arch_flags=flags))
    arch = c["gpu.device_arch"]
    if missing is None:
        assert arch["status"] == "passed", arch
    else:
        assert arch["status"] == "failed"
        assert arch["reason"] == f"torch carries no kernels for {missing}; arch list {' '.join(sorted(flags.split()))}"


def test_mig_devices_are_listed(smi):
    """On a MIG GPU torch sees the MIG slice (its name says so); nvidia-smi -L lists the GPU and its MIG devices."""
    smi(_smi_list("NVIDIA H200", mig=("1g.18gb", "1g.18gb")))
    p, c = _run(fake_cuda_torch([H200_MIG]))
    assert c["gpu.available"]["reason"] == "1 GPU(s): NVIDIA H200 MIG 1g.18gb (sm_90)"
    listed = p.doc["gpu"]["nvidia_smi"]
    assert listed["gpu_count"] == 1 and listed["mig_count"] == 2 and listed["unparsed"] == []
    assert [m["profile"] for m in listed["gpus"][0]["mig"]] == ["1g.18gb", "1g.18gb"]
    assert listed["gpus"][0]["mig"][1] == {"profile": "1g.18gb", "device": 1, "uuid": MIG_UUID.format(1)}
    assert c["gpu.nvidia_smi"]["status"] == "passed" and c["gpu.nvidia_smi"]["reason"] == "1 GPU(s), 2 MIG device(s)"
    assert c["gpu.nvidia_smi"]["figures"]["driver"] == "570.86.15"


def test_nvidia_smi_listing_fewer_devices_than_torch_sees_fails(smi):
    smi(_smi_list("NVIDIA H200"))
    _, c = _run(fake_cuda_torch([H200, H200]))
    assert c["gpu.nvidia_smi"]["status"] == "failed"
    assert c["gpu.nvidia_smi"]["reason"] == "nvidia-smi -L lists 1 GPU(s) and 0 MIG device(s), torch sees 2"


def test_nvidia_smi_that_fails_names_its_error(smi):
    smi("", rc=9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    _, c = _run(fake_cuda_torch([H200]))
    assert c["gpu.nvidia_smi"]["status"] == "failed"
    assert c["gpu.nvidia_smi"]["reason"].startswith("nvidia-smi -L failed: NVIDIA-SMI has failed because")


def test_the_rebinding_crash_is_what_these_tests_catch(smi):
    """The old device loop (p rebound to the device properties, then p.doc written) crashes on the fake as it did on
    the H200: the fake's properties have the real attribute names only, no `doc`."""
    smi(_smi_list("NVIDIA H200"))

    def old_loop(p: P.Probe) -> None:  # the shape scripts/lint_probe.py refuses in the probe
        torch = p.import_torch()
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)  # type: ignore[assignment]
        p.doc["gpu"] = {}

    p = P.Probe(["gpu"])
    p.torch, p._gpu = fake_cuda_torch([H200]), (True, "")
    p.run({"gpu": old_loop})
    crash = {c["name"]: c for c in p.doc["checks"]}["gpu.probe"]
    assert crash["status"] == "failed" and "AttributeError" in crash["reason"] and "'doc'" in crash["reason"]
    props = p.torch.cuda.get_device_properties(0)
    assert not hasattr(props, "doc") and sorted(a for a in dir(props) if not a.startswith("_")) == sorted(PROPERTIES)
    with pytest.raises(AttributeError):
        props.doc = {}


@pytest.mark.parametrize("kw, state", [
    ({}, (True, "")),
    ({"devices": ()}, (False, P.NO_GPU)),  # a CUDA build on a host without a GPU
    ({"cuda": None}, (False, P.NO_CUDA_TORCH)),  # the CPU wheel
])
def test_gpu_state_reads_the_fake_as_it_reads_torch(kw, state):
    p = P.Probe(["gpu"])
    p.torch = fake_cuda_torch(**kw)
    assert p.gpu_state() == state and p._gpu == state


_REAL_NAMES = r"""
import inspect, json, os, re, sys
import torch
api, cuda_build, props = json.loads(sys.argv[1])
def has(dotted):
    obj = torch
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True
source = inspect.getsource(torch.cuda) + inspect.getsource(torch.backends.cudnn)
stub = open(os.path.join(os.path.dirname(torch.__file__), "_C", "__init__.pyi")).read()
body = re.search(r"^class _CudaDeviceProperties:\n((?:    .*\n)+)", stub, re.M).group(1)
fields = re.findall(r"^    (\w+):", body, re.M)
print(json.dumps({"missing": [n for n in api if not has(n)],
                  "not_in_source": [n for n in cuda_build if n.split(".")[-1] not in source],
                  "fields": fields, "capability": "return prop.major, prop.minor" in source}))
"""


def test_the_fakes_names_are_torchs(torch_python):
    """Each name the fake answers under is one of the real torch's: its API on the CPU wheel, the CUDA-build-only
    functions by the wheel's python source that calls them, the device properties by torch's _CudaDeviceProperties
    stub (the CPU wheel has no such class to dir())."""
    out = subprocess.run([torch_python, "-c", _REAL_NAMES, json.dumps([API, CUDA_BUILD_API, PROPERTIES])],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["missing"] == [] and got["not_in_source"] == []
    assert set(PROPERTIES) <= set(got["fields"]), sorted(set(PROPERTIES) - set(got["fields"]))
    assert got["capability"]  # get_device_capability is (properties.major, properties.minor), as the fake's
