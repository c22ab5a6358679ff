"""`imagebuild run` without an engine: --gpus against recorded hosts, NUMA pinning, /dev/shm sizing, the docker run
line, and bad input (unknown GPU index / MIG UUID, port in use, no public key, --jupyter on a non-dev image) failing
with one `error:` line, exit 2 and no container created (a fake engine records every create)."""

from __future__ import annotations

import shlex
import socket
import sys
from pathlib import Path

import pytest
from _fake_engine import FakeEngine
from _hosts import HOSTS, topo_of

from imagebuild.errors import UsageError
from imagebuild.host import Topology
from imagebuild.launch import devaccess
from imagebuild.launch.gpus import NO_GPUS_NOTE, select_gpus
from imagebuild.launch.image import ImageInfo
from imagebuild.launch.numa import place
from imagebuild.launch.spec import RunRequest, make_launch, shm_size_for

RUNTIME = ImageInfo("reg/pytorch:2.9.1-runtime", "sha256:" + "a" * 64,
                    {"io.imagebuild.flavor": "runtime"}, "1000:1000")
DEV = ImageInfo("reg/pytorch:2.9.1-dev", "sha256:" + "b" * 64, {"io.imagebuild.flavor": "dev"}, "1000:1000")
GIB = 1 << 30


# --gpus ------------------------------------------------------------------------------------------------------------

def test_all_gpus_and_indexes():
    topo = topo_of("h100-2s8g")
    every = select_gpus("all", topo, True)
    assert every.request and every.device_ids == () and len(every.gpus) == 8
    two = select_gpus("0,1", topo, True)
    assert two.device_ids == ("0", "1") and [g.index for g in two.gpus] == [0, 1]
    assert select_gpus('"device=2"', topo, True).device_ids == ("2",)  # docker's own spelling
    assert select_gpus("none", topo, True).request is False


def test_gpu_and_mig_uuids():
    topo = topo_of("h100-mig")
    gpu1 = topo.gpus[1].uuid
    assert select_gpus(gpu1.lower(), topo, True).device_ids == (gpu1,)
    mig = topo.gpus[0].mig[2]
    sel = select_gpus(mig.uuid, topo, True)
    assert sel.device_ids == (mig.uuid,) and sel.gpus == (topo.gpus[0],)  # NUMA placement follows the parent GPU


def test_unknown_index_names_the_valid_choices():
    with pytest.raises(UsageError) as exc:
        select_gpus("0,8", topo_of("h100-2s8g"), True)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("--gpus 0,8: no GPU index '8' on this host; valid choices: all, none, GPU indexes 0-7")


def test_unknown_mig_uuid():
    topo = topo_of("h100-mig")
    with pytest.raises(UsageError) as exc:
        select_gpus("MIG-00000000-0000-4000-8000-000000000000", topo, True)
    assert "no MIG device 'MIG-00000000-0000-4000-8000-000000000000'" in str(exc.value)
    assert "one of the 4 MIG- device UUIDs" in str(exc.value)
    with pytest.raises(UsageError, match="no GPU UUID 'GPU-deadbeef'"):
        select_gpus("GPU-deadbeef", topo, True)


def test_host_without_gpus():
    empty = Topology()
    sel = select_gpus("all", empty, False)
    assert not sel.request and sel.note == NO_GPUS_NOTE
    with pytest.raises(UsageError, match="this host has no GPUs"):
        select_gpus("0", empty, False)
    # the engine has a GPU runtime but nothing lists the GPUs: requested as given, and said so
    blind = select_gpus("0", empty, True)
    assert blind.request and blind.device_ids == ("0",) and "unchecked" in (blind.note or "")


# NUMA ---------------------------------------------------------------------------------------------------------------

def test_gpus_of_one_node_are_pinned_to_it():
    topo = topo_of("h100-2s8g")
    p = place(select_gpus("4,5,6,7", topo, True).gpus, topo)
    assert (p.cpus, p.mems) == ("56-111,168-223", "1")
    assert "GPU 4,5,6,7 on node 1" in p.note


def test_gpus_spanning_nodes_are_not_pinned_and_say_why():
    topo = topo_of("h100-2s8g")
    p = place(select_gpus("all", topo, True).gpus, topo)
    assert p.cpus is None and p.mems is None
    assert "span nodes 0 (GPU 0,1,2,3) and 1 (GPU 4,5,6,7): not pinned" in p.note and "numactl" in p.note


def test_one_node_host_needs_no_pinning():
    topo = topo_of("h100nvl-1s2g")
    p = place(topo.gpus, topo)
    assert p.cpus is None and "one NUMA node" in p.note


def test_mig_device_pinned_to_its_gpus_node():
    topo = topo_of("h100-mig")
    p = place(select_gpus(topo.gpus[0].mig[0].uuid, topo, True).gpus, topo)
    assert (p.cpus, p.mems) == ("0-31,64-95", "0")


def test_unreported_node_is_not_pinned(tmp_path):
    import shutil

    from imagebuild.host import read_topology

    root = tmp_path / "h"
    shutil.copytree(HOSTS / "h100-2s8g", root)
    (root / "sys/bus/pci/devices/0000:2a:00.0/numa_node").write_text("-1\n")
    topo = read_topology(root)
    p = place(select_gpus("0,1", topo, True).gpus, topo)
    assert p.cpus is None and "GPU 1 reports no NUMA node" in p.note


# the container's settings ------------------------------------------------------------------------------------------

def test_shm_is_half_the_host_memory():
    assert shm_size_for(2113389776 * 1024) == "1007g"
    assert shm_size_for(16 * GIB) == "8g" and shm_size_for(GIB) == "1g" and shm_size_for(None) == "16g"


def test_docker_run_line(tmp_path):
    topo = topo_of("h100-2s8g")
    req = RunRequest(command=("python", "train.py"), gpus="0,1", workspace=tmp_path, caller=(1234, 1234))
    launch = make_launch(req, RUNTIME, topo, engine_has_gpus=True, mem_bytes=64 * GIB)
    line = launch.settings.docker_run_args()
    text = shlex.join(line)
    assert text.startswith("docker run --rm --name ibrun-pytorch-2.9.1-runtime-")
    for part in ("--gpus '\"device=0,1\"'", "--shm-size=32g", "--ulimit memlock=-1", "--ulimit stack=67108864",
                 "--cpuset-cpus=0-55,112-167", "--cpuset-mems=0", "--network=host", f"-v {tmp_path}:/workspace",
                 "-w /workspace", "--user 1234:1234", "-e HOME=/tmp/home"):
        assert part in text, part
    assert line[-3:] == [RUNTIME.id, "python", "train.py"]
    kw = launch.settings.kwargs()
    assert kw["device_requests"][0]["DeviceIDs"] == ["0", "1"] and kw["cpuset_cpus"] == "0-55,112-167"
    assert kw["volumes"] == {str(tmp_path): {"bind": "/workspace", "mode": "rw"}} and kw["user"] == "1234:1234"
    assert "tty" not in kw and "ipc_mode" not in kw and kw["shm_size"] == "32g"


def test_ipc_host_terminal_and_no_numa(tmp_path):
    req = RunRequest(gpus="all", ipc_host=True, numa=False, interactive=True, workspace=None, caller=(1000, 1000))
    s = make_launch(req, RUNTIME, topo_of("h100-2s8g"), engine_has_gpus=True, mem_bytes=None).settings
    args = s.docker_run_args()
    assert "--ipc=host" in args and "--gpus" in args and args[args.index("--gpus") + 1] == "all"
    assert "-i" in args and "-t" in args and not any(a.startswith("--cpuset") for a in args)
    assert "HOME" not in s.environment  # the image's own user: its own home
    assert s.kwargs()["command"] is None  # no command: the image's CMD


def test_jupyter_needs_a_dev_image():
    with pytest.raises(UsageError) as exc:
        make_launch(RunRequest(jupyter=True), RUNTIME, Topology(), engine_has_gpus=False, mem_bytes=None)
    assert str(exc.value).startswith("--jupyter needs a dev image") and "is a runtime image" in str(exc.value)
    plain = ImageInfo("debian:12", "sha256:" + "c" * 64)
    with pytest.raises(UsageError, match="not an imagebuild image"):
        make_launch(RunRequest(ssh=True), plain, Topology(), engine_has_gpus=False, mem_bytes=None)


def test_jupyter_fresh_token_on_localhost():
    a = make_launch(RunRequest(jupyter=True, caller=(0, 0)), DEV, Topology(), engine_has_gpus=False, mem_bytes=None)
    b = make_launch(RunRequest(jupyter=True, caller=(0, 0)), DEV, Topology(), engine_has_gpus=False, mem_bytes=None)
    assert a.access and b.access and a.access.environment["JUPYTER_TOKEN"] != b.access.environment["JUPYTER_TOKEN"]
    assert len(a.access.environment["JUPYTER_TOKEN"]) == 48
    assert "--ServerApp.ip=127.0.0.1" in a.settings.command and "--allow-root" in a.settings.command
    assert a.access.message == (f"http://127.0.0.1:{a.access.port}/lab?token={a.access.environment['JUPYTER_TOKEN']}")
    assert a.settings.network == "host" and not a.settings.tty


def test_port_in_use():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UsageError) as exc:
            make_launch(RunRequest(jupyter=True, port=port), DEV, Topology(), engine_has_gpus=False, mem_bytes=None)
    assert str(exc.value).startswith(f"--port {port}: 127.0.0.1:{port} is in use")


def test_ssh_keys(tmp_path):
    home = tmp_path / "home"
    with pytest.raises(UsageError, match=r"--ssh needs your public key: no .*/\.ssh/\*\.pub found"):
        make_launch(RunRequest(ssh=True, home=home), DEV, Topology(), engine_has_gpus=False, mem_bytes=None)
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh/id_rsa.pub").write_text("ssh-rsa AAAArsa me@host\n")
    (home / ".ssh/id_ed25519.pub").write_text("ssh-ed25519 AAAAed me@host\n")
    launch = make_launch(RunRequest(ssh=True, home=home, caller=(1234, 999)), DEV, Topology(),
                         engine_has_gpus=False, mem_bytes=None)
    env = launch.settings.environment
    assert env["IMAGEBUILD_SSH_KEYS"] == "ssh-ed25519 AAAAed me@host\nssh-rsa AAAArsa me@host\n"
    assert (env["IMAGEBUILD_CALLER_UID"], env["IMAGEBUILD_CALLER_GID"], env["IMAGEBUILD_LOGIN_UID"]) == \
        ("1234", "999", "1000")
    assert launch.settings.user == "0:0"  # sshd starts as root and drops to the login user
    assert launch.access and launch.access.message.endswith(f"-p {launch.access.port} -o UserKnownHostsFile="
                                                             "/dev/null -o StrictHostKeyChecking=no ml@127.0.0.1")
    private = tmp_path / "id_ed25519"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n-----END OPENSSH PRIVATE KEY-----\n")
    with pytest.raises(UsageError, match="this is a private key"):
        devaccess.public_keys(private, home)


# the command, end to end against a fake engine: bad input creates nothing -----------------------------------------

class _FakeContainers:
    def __init__(self):
        self.created: list[dict] = []

    def create(self, **kw):
        self.created.append(kw)
        raise AssertionError("a container was created")


class _FakeClient(FakeEngine):
    """The shared fake engine holding the two images, plus a container side that must never be used."""

    def __init__(self):
        super().__init__()
        for info in (RUNTIME, DEV):
            self.add_image(info.ref, info.labels, image_id=info.id)
            self.images_by_id[info.id]["Config"]["User"] = info.user
        self.containers = _FakeContainers()

    def info(self):
        return {"Runtimes": {"runc": {}}}


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    client = _FakeClient()
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: client)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "nohome"))
    monkeypatch.chdir(tmp_path)

    def run(host: str | None, *args: str) -> tuple[int, str, str]:
        if host:
            monkeypatch.setenv("IMAGEBUILD_HOST_ROOT", str(HOSTS / host))
        monkeypatch.setattr(sys, "argv", ["imagebuild", "run", *args])
        from imagebuild.cli import main

        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        return int(exc.value.code or 0), out.out, out.err

    run.client = client  # type: ignore[attr-defined]
    return run


@pytest.mark.parametrize("host, args, message", [
    ("h100-2s8g", ["--gpus", "9", RUNTIME.ref], "error: --gpus 9: no GPU index '9' on this host; valid choices: "),
    ("h100-mig", ["--gpus", "MIG-6f2a0c3e-0000-4000-8000-000000000000", RUNTIME.ref],
     "error: --gpus MIG-6f2a0c3e-0000-4000-8000-000000000000: no MIG device "),
    (None, ["--ssh", DEV.ref], "error: --ssh needs your public key: no "),
    (None, ["--jupyter", RUNTIME.ref], "error: --jupyter needs a dev image"),
    (None, ["reg/missing:1"], "error: image 'reg/missing:1' is not in the engine"),
])
def test_bad_input_one_line_exit_2_no_container(cli, host, args, message):
    code, out, err = cli(host, *args)
    assert code == 2 and out == ""
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(message), err
    assert cli.client.containers.created == []


def test_port_in_use_through_the_command(cli):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = cli(None, "--jupyter", "--port", str(port), DEV.ref)
    assert code == 2 and f"error: --port {port}: 127.0.0.1:{port} is in use" in err
    assert cli.client.containers.created == []


def test_print_on_a_recorded_host(cli, tmp_path):
    code, out, err = cli("h100-2s8g", "--print", "--gpus", "4,5", RUNTIME.ref, "--", "python", "-c", "print(1)")
    assert code == 0 and cli.client.containers.created == []
    args = shlex.split(out)
    assert args[:3] == ["docker", "run", "--rm"] and args[-4:] == [RUNTIME.ref, "python", "-c", "print(1)"]
    assert "--cpuset-cpus=56-111,168-223" in args and "--cpuset-mems=1" in args
    assert "--shm-size=1007g" in args  # half of the recorded host's 2 TB
    assert "NUMA: GPU 4,5 on node 1" in err


@pytest.mark.parametrize("args, word", [
    ([RUNTIME.ref, "--jupyter"], "--jupyter is an option of imagebuild run"),
    ([RUNTIME.ref, "--gpus=0", "python"], "--gpus is an option of imagebuild run"),
    ([RUNTIME.ref, "-e", "A=1"], "-e is an option of imagebuild run"),
    ([RUNTIME.ref, "--lr", "1"], "--lr comes"),
])
def test_options_after_the_image_are_refused_with_a_hint(cli, args, word):
    """`run REF --jupyter` would hand `--jupyter` to the container as its command; the user meant run's option."""
    code, out, err = cli(None, *args)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and out == "" and cli.client.containers.created == []
    assert lines == [f"error: {word} after the image {RUNTIME.ref}: put options before REF, or after `--` to pass "
                     "them to the container"], err


def test_options_after_double_dash_go_to_the_container(cli):
    code, out, _ = cli(None, "--print", RUNTIME.ref, "--", "--jupyter")
    assert code == 0 and shlex.split(out)[-2:] == [RUNTIME.ref, "--jupyter"]
    code, out, _ = cli(None, "--print", RUNTIME.ref, "python", "train.py", "--lr", "1")
    assert code == 0 and shlex.split(out)[-4:] == ["python", "train.py", "--lr", "1"]
