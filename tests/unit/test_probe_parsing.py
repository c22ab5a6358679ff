"""The probe's pure parsing helpers, on captured text in the shapes of BRIEF §5."""

from __future__ import annotations

import re

import pytest

from imagebuild.smoke import probe as P

NCCL_NVLINK = """\
h100-node-07:48211:48211 [0] NCCL INFO Bootstrap: Using eth0:10.1.4.17<0>
h100-node-07:48211:48211 [0] NCCL INFO cudaDriverVersion 12090
h100-node-07:48211:48211 [0] NCCL INFO NCCL version 2.27.5+cuda12.9
h100-node-07:48211:48290 [0] NCCL INFO NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)
h100-node-07:48211:48290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h100-node-07:48211:48290 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h100-node-07:48212:48291 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
h100-node-07:48211:48290 [0] NCCL INFO NVLS comm 0x55d1c2a0 headRank 0 nHeads 8 buffSize 1048576 memSize 2097152
h100-node-07:48211:48290 [0] NCCL INFO Connected all rings
h100-node-07:48211:48290 [0] NCCL INFO Connected NVLS tree
"""

NCCL_OLD_IPC = """\
dgx1:901:901 [0] NCCL INFO NCCL version 2.10.3+cuda11.4
dgx1:901:950 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC
dgx1:902:951 [1] NCCL INFO Channel 00 : 1[1c000] -> 0[1b000] via P2P/IPC
dgx1:901:950 [0] NCCL INFO Channel 01 : 0[1b000] -> 1[1c000] via P2P/direct pointer
"""

NCCL_SHM = """\
box:77:77 [0] NCCL INFO NCCL version 2.26.2+cuda12.8
box:77:99 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct
box:78:98 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct
box:77:99 [0] NCCL INFO NVLS multicast support is not available on dev 0
"""

NCCL_MULTINODE = """\
[0] h20-a:3001:3001 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
[0] h20-a:3001:3050 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
[7] h20-a:3008:3057 [7] NCCL INFO Channel 00/0 : 15[7] -> 7[7] [receive] via NET/IBext_v8/3(7)/GDRDMA
[7] h20-a:3008:3057 [7] NCCL INFO Channel 00/0 : 7[7] -> 15[7] [send] via NET/IBext_v8/3(7)/GDRDMA
[8] h20-b:4001:4050 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [receive] via NET/IB/1/GDRDMA
[9] h20-b:4002:4051 [1] NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/Socket/0
"""

SMI_MIG = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c7b2d3e-1a2b-3c4d-5e6f-0123456789ab)
  MIG 3g.40gb     Device  0: (UUID: MIG-0f3d1c2b-aaaa-bbbb-cccc-111111111111)
  MIG 1g.10gb     Device  1: (UUID: MIG-1a2b3c4d-aaaa-bbbb-cccc-222222222222)
  MIG 1g.10gb     Device  2: (UUID: MIG-2b3c4d5e-aaaa-bbbb-cccc-333333333333)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-6d8c3e4f-1a2b-3c4d-5e6f-0123456789ac)
"""

SMI_H200 = """\
GPU 0: NVIDIA H200 (UUID: GPU-aa11bb22-cc33-dd44-ee55-ff6677889900)
  MIG 1g.18gb     Device  0: (UUID: MIG-00000000-1111-2222-3333-444444444444)
  MIG 7g.141gb    Device  1: (UUID: MIG-00000000-1111-2222-3333-555555555555)
GPU 1: NVIDIA H200 (UUID: GPU-aa11bb22-cc33-dd44-ee55-ff6677889901)
GPU 2: NVIDIA H200 (UUID: GPU-aa11bb22-cc33-dd44-ee55-ff6677889902)
"""

SMI_OLD_MIG = """\
GPU 0: A100-SXM4-40GB (UUID: GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2)
  MIG 1g.5gb Device 0: (UUID: MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/7/0)
"""

DEBIAN = """\
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
"""

UBUNTU = """\
PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.1 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
"""


def test_nccl_nvlink_p2p_cumem_and_nvls():
    r = P.parse_nccl_log(NCCL_NVLINK)
    assert r["version"] == "2.27.5+cuda12.9"
    assert len(r["channels"]) == 3
    assert r["channels"][0] == {"channel": "00/0", "src": 0, "src_dev": "0", "dst": 1, "dst_dev": "1",
                                "direction": None, "via": "P2P/CUMEM/read", "transport": "P2P/CUMEM",
                                "gdrdma": False}
    assert r["nvls"] is True
    assert r["transports"] == ["P2P/CUMEM", "NVLS"]
    assert r["summary"] == "P2P/CUMEM, NVLS"


def test_nccl_old_ipc_and_direct_pointer():
    r = P.parse_nccl_log(NCCL_OLD_IPC)
    assert r["version"] == "2.10.3+cuda11.4"
    assert r["transports"] == ["P2P/IPC", "P2P/direct"]
    assert r["channels"][0]["src_dev"] == "1b000" and r["channels"][0]["channel"] == "00"


def test_nccl_shm_without_nvls():
    r = P.parse_nccl_log(NCCL_SHM)
    assert r["transports"] == ["SHM"]
    assert r["nvls"] is False


def test_nccl_multinode_rank_prefix_send_receive():
    r = P.parse_nccl_log(NCCL_MULTINODE)
    assert r["version"] == "2.21.5+cuda12.4"
    assert r["transports"] == ["NET/IB", "NET/Socket", "P2P/CUMEM"]
    dirs = [c["direction"] for c in r["channels"]]
    assert dirs == [None, "receive", "send", "receive", "send"]
    ib = [c for c in r["channels"] if c["transport"] == "NET/IB"]
    assert all(c["gdrdma"] for c in ib)
    assert ib[0]["via"] == "NET/IBext_v8/3(7)/GDRDMA"
    assert (ib[0]["src"], ib[0]["dst"]) == (15, 7)


def test_nccl_empty_log():
    r = P.parse_nccl_log("")
    assert r == {"version": None, "channels": [], "transports": [], "nvls": False, "summary": "none"}


@pytest.mark.parametrize("via,kind", [
    ("P2P/CUMEM/read", "P2P/CUMEM"), ("P2P/CUMEM", "P2P/CUMEM"), ("P2P/IPC/read", "P2P/IPC"),
    ("P2P/direct pointer", "P2P/direct"), ("SHM/direct/direct", "SHM"), ("NET/IB/0/GDRDMA", "NET/IB"),
    ("NET/IBext_v8/0(1)/GDRDMA", "NET/IB"), ("NET/Socket/0", "NET/Socket"), ("NVLS", "NVLS"),
    ("NET/AWS Libfabric/0/GDRDMA", "NET/AWS Libfabric"),
])
def test_nccl_transport_kind(via, kind):
    assert P.nccl_transport_kind(via) == kind


def test_nvidia_smi_mig():
    r = P.parse_nvidia_smi_list(SMI_MIG)
    assert r["gpu_count"] == 2 and r["mig_count"] == 3
    g0 = r["gpus"][0]
    assert g0["name"] == "NVIDIA H100 80GB HBM3"
    assert g0["uuid"] == "GPU-5c7b2d3e-1a2b-3c4d-5e6f-0123456789ab"
    assert [m["profile"] for m in g0["mig"]] == ["3g.40gb", "1g.10gb", "1g.10gb"]
    assert [m["device"] for m in g0["mig"]] == [0, 1, 2]
    assert g0["mig"][0]["uuid"].startswith("MIG-0f3d1c2b")
    assert r["gpus"][1]["mig"] == []
    assert r["unparsed"] == []


def test_nvidia_smi_h200_and_old_mig_format():
    r = P.parse_nvidia_smi_list(SMI_H200)
    assert r["gpu_count"] == 3 and r["mig_count"] == 2
    assert r["gpus"][0]["mig"][1]["profile"] == "7g.141gb"
    old = P.parse_nvidia_smi_list(SMI_OLD_MIG)
    assert old["gpus"][0]["name"] == "A100-SXM4-40GB"
    assert old["gpus"][0]["mig"][0]["uuid"] == "MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/7/0"


def test_nvidia_smi_error_text_is_unparsed():
    r = P.parse_nvidia_smi_list("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert r["gpu_count"] == 0 and len(r["unparsed"]) == 1


def test_os_release():
    d = P.parse_os_release(DEBIAN)
    assert (d["id"], d["version_id"], d["codename"], d["key"]) == ("debian", "12", "bookworm", "debian12")
    u = P.parse_os_release(UBUNTU)
    assert u["key"] == "ubuntu24.04" and u["pretty_name"] == "Ubuntu 24.04.1 LTS" and u["id_like"] == "debian"
    t = P.parse_os_release('# comment\nID=debian\nVERSION_CODENAME=trixie\nPRETTY_NAME="Debian \\"testing\\""\n')
    assert t["key"] == "debian-trixie" and t["pretty_name"] == 'Debian "testing"'


def test_secret_env_names_only():
    env = {"HTTPS_PROXY": "http://bob:hunter2@proxy:3128", "HTTP_PROXY": "http://proxy:3128",
           "REGISTRY_PASSWORD": "s3cret", "HF_TOKEN": "hf_abc", "AWS_SECRET_ACCESS_KEY": "x", "PATH": "/usr/bin",
           "EMPTY_TOKEN": "", "PIP_INDEX_URL": "https://u:p@pypi.example/simple"}
    found = P.find_secret_env(env)
    names = [f["name"] for f in found]
    assert names == ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "HTTPS_PROXY", "PIP_INDEX_URL", "REGISTRY_PASSWORD"]
    assert "hunter2" not in repr(found) and "s3cret" not in repr(found)


@pytest.mark.parametrize("name,secret", [
    ("HF_TOKEN", True), ("GITHUB_TOKEN", True), ("TOKEN", True), ("TOKEN_FILE", True), ("NPM_TOKENS", True),
    ("DB_PASSWORD", True), ("PGPASSWORD", True), ("MYSQL_PWD", True), ("REGISTRY_PASSWD", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("OPENAI_API_KEY", True), ("APIKEY", True), ("MY_APIKEY", True), ("SSH_PRIVATE_KEY", True),
    ("GOOGLE_APPLICATION_CREDENTIALS", True), ("COSIGN_PASSWORD", True), ("client-secret", True),
    # a word inside a part is not the word: the H200 host's TIKTOKEN_CACHE_DIR was flagged as a secret
    ("TIKTOKEN_CACHE_DIR", False), ("TOKENIZERS_PARALLELISM", False), ("PASSWORDLESS", False), ("PWD", False),
    ("KEYBOARD_LAYOUT", False), ("SECRETARY", False), ("CUDA_HOME", False), ("HF_HOME", False),
])
def test_secret_names_match_whole_parts(name, secret):
    assert P.find_secret_env({name: "x"}) == ([{"name": name, "why": "name looks like a secret"}] if secret else [])


@pytest.mark.parametrize("name,key", [
    ("libcudnn.so.9", "libcudnn.so.9"), ("libcudnn.so.9.10.2", "libcudnn.so.9"),
    ("libcudnn_ops.so.9", "libcudnn_ops.so.9"), ("libcudnn_engines_precompiled.so.9", "libcudnn_engines_precompiled.so.9"),
    ("libnccl.so.2", "libnccl.so.2"), ("libnccl.so.2.27.5", "libnccl.so.2"), ("libcublas.so.12", "libcublas.so.12"),
    ("libcublasLt.so.13.0.0.19", "libcublasLt.so.13"), ("libcudnn.so", None), ("libnccl-net.so", None),
    ("libcudart.so.12", "libcudart.so.12"), ("libcudart.41118559.so.12", "libcudart.so.12"),
    ("libcudart-41118559.so.12.8.90", "libcudart.so.12"), ("libnvrtc-builtins.so.12.8", None),
    ("libcudart.4111855.so.12", None),
])
def test_library_key(name, key):
    assert P.library_key(name) == key


def test_group_library_copies_dedupes_symlinks():
    entries = [
        ("/usr/lib/x86_64-linux-gnu/libcudnn.so.9", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0"),
        ("/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0"),
        ("/opt/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
         "/opt/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9"),
        ("/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
         "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"),
    ]
    g = P.group_library_copies(entries)
    assert len(g["libcudnn.so.9"]) == 2  # system + pip: the duplicate the check must catch
    assert len(g["libnccl.so.2"]) == 1
    assert P.library_family("libcudnn_ops.so.9") == "cudnn" and P.library_family("libcublasLt.so.12") == "cublas"


def test_parse_ldconfig():
    text = ("3 libs found in cache `/etc/ld.so.cache'\n"
            "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
            "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n")
    assert P.parse_ldconfig(text) == ["/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/lib/x86_64-linux-gnu/libc.so.6"]


def test_format_cudnn_version():
    assert P.format_cudnn_version(91002) == "9.10.2"
    assert P.format_cudnn_version(91300) == "9.13.0"
    assert P.format_cudnn_version(8907) == "8.9.7"
    assert P.format_cudnn_version(None) is None


@pytest.mark.parametrize("key,expected,found,ok", [
    ("torch", "2.9.1", "2.9.1+cu128", True),
    ("torch", "2.9.1", "2.9.10", False),
    ("torch", "2.9", "2.9.1+cu128", True),
    ("torch", "2.9.1+cu130", "2.9.1+cu128", False),
    ("torch", "2.13.0", "2.13.0+cpu", True),
    ("python", "3.11", "3.11.2", True),
    ("python", "3.12", "3.11.2", False),
    ("cudnn", "9.10.2.21", "9.10.2", True),
    ("cudnn", "9.13.0.50", "9.10.2", False),
    ("nccl", "2.27.5", "2.27.5", True),
    ("cuda", "12.8", "12.8", True),
    ("cuda", "12.8", None, False),
    ("cuda", "cpu", None, True),
    ("cuda", "cpu", "12.8", False),
    ("cudnn", "", None, True),
    ("cudnn", "none", "9.10.2", False),
    ("torchvision", "0.24.1", None, False),
    ("os", "ubuntu24.04", "ubuntu24.04", True),
    ("os", "debian12", "ubuntu24.04", False),
    ("tf32", "true", True, True),
    ("tf32", "false", True, False),
    ("transformer-engine", "2.12", "2.12.0", True),
])
def test_versions_match(key, expected, found, ok):
    assert P.versions_match(key, expected, found) is ok


@pytest.mark.parametrize("a,b", [("9.0", "sm_90"), ("sm_90", "sm_90"), ("90", "sm_90"), ("sm90", "sm_90"),
                                 ("8.0", "sm_80"), ("compute_90", "compute_90"), ("10.0", "sm_100")])
def test_normalize_arch(a, b):
    assert P.normalize_arch(a) == b


def test_sshd_parsers():
    eff = P.parse_sshd_T("port 22\npasswordauthentication no\npermitrootlogin without-password\n")
    assert eff["passwordauthentication"] == "no"
    files = ["PasswordAuthentication no  # from sshd_config.d\n",
             "#PasswordAuthentication yes\nPasswordAuthentication yes\nMatch User bob\n  PasswordAuthentication yes\n"]
    assert P.parse_sshd_config_files(files)["passwordauthentication"] == "no"


def test_render_table():
    doc = {"probe": {"seconds": 3.2}, "versions": {"torch": "2.9.1+cu128", "cuda": "12.8"},
           "gpu": {"devices": [{"index": 0, "name": "NVIDIA H200", "sm": "sm_90"}]},
           "checks": [{"name": "gpu.available", "status": "passed", "reason": "1 GPU(s)"},
                      {"name": "te.fp8", "status": "skipped", "reason": "transformer_engine is not installed"}]}
    text = P.render_table(doc)
    assert "0:NVIDIA H200(sm_90)" in text and "1 passed, 0 failed, 1 skipped in 3.2 s" in text


def test_probe_module_does_not_import_imagebuild():
    from pathlib import Path

    files = sorted(Path(P.__file__).parent.glob("*.py"))
    assert len(files) > 10
    for f in files:
        src = f.read_text()
        assert "import imagebuild" not in src and "from imagebuild" not in src, f
        assert not re.search(r"^\s*from \.", src, re.M), f  # modules import each other as probe.*, not relatively
        assert len(src.splitlines()) < 300, f
