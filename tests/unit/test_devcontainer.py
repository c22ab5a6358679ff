"""`imagebuild devcontainer` against the shared fake engine: the JSON written (run's settings as runArgs, the image
bound by digest or ID, remoteUser from the image's /etc/passwd, ports, the workspace mount), the memlock choice probed
once and stated in one line, bad input as one `error:` line with nothing written, an existing file kept without
--force. (tests/integration/test_devcontainer_cli.py brings the file up with the real Dev Containers CLI.)"""

from __future__ import annotations

import io
import json
import shlex
import sys
import tarfile
from pathlib import Path

import docker
import pytest
from _fake_engine import FakeEngine
from _hosts import HOSTS

from imagebuild.engine import ContainerSettings
from imagebuild.launch.devcontainer import config, image_reference, login_user, run_args

DEV_ID = "sha256:" + "b" * 64
RUNTIME_ID = "sha256:" + "a" * 64
DEV_REF = "reg/pytorch:2.13.0-cpu-dev"
RUNTIME_REF = "reg/pytorch:2.13.0-cpu-runtime"
PASSWD = b"root:x:0:0:root:/root:/bin/bash\nml:x:1000:1000::/home/ml:/bin/bash\n"
MEMLOCK_REFUSED = ("OCI runtime create failed: container_linux.go:380: starting container process caused: "
                   "error setting rlimit type 8: operation not permitted: unknown")


def _tar(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class _Container:
    def __init__(self, engine: _Containers, kw: dict):
        self.engine, self.kw = engine, kw
        self.id = f"c{len(engine.created)}"
        self.attrs: dict = {}

    def start(self):
        names = [u["Name"] for u in self.kw.get("ulimits") or []]
        if "memlock" in names and self.engine.refuse_memlock:
            raise docker.errors.APIError(MEMLOCK_REFUSED)
        self.engine.started.append(self.id)

    def reload(self):
        self.attrs = {"HostConfig": {"Ulimits": [dict(u) for u in self.kw.get("ulimits") or []]}}

    def remove(self, force=False, v=False):
        self.engine.removed.append(self.id)


class _Containers:
    def __init__(self):
        self.created: list[dict] = []
        self.started: list[str] = []
        self.removed: list[str] = []
        self.refuse_memlock = False

    def create(self, **kw):
        container = _Container(self, kw)
        self.created.append(kw)
        return container


class _Client(FakeEngine):
    """The shared fake engine with a dev and a runtime image, and a container side for the ulimit probe."""

    def __init__(self, dev_digests: tuple[str, ...] = ()):
        super().__init__()
        self.add_image(DEV_REF, {"io.imagebuild.flavor": "dev"}, image_id=DEV_ID, repo_digests=dev_digests)
        self.add_image(RUNTIME_REF, {"io.imagebuild.flavor": "runtime"}, image_id=RUNTIME_ID)
        for iid in (DEV_ID, RUNTIME_ID):
            self.images_by_id[iid]["Config"]["User"] = "1000:1000"
            self.archives[iid] = _tar("passwd", PASSWD)
        self.containers = _Containers()

    def info(self):
        return {"Runtimes": {"runc": {}}}


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    holder = {"client": _Client()}
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: holder["client"])
    monkeypatch.setenv("IMAGEBUILD_HOST_ROOT", str(HOSTS / "h100-2s8g"))
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["imagebuild", "devcontainer", *args])
        from imagebuild.cli import main

        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        return int(exc.value.code or 0), out.out, out.err

    run.holder = holder  # type: ignore[attr-defined]
    return run


def _written(tmp_path: Path) -> dict:
    return json.loads((tmp_path / ".devcontainer" / "devcontainer.json").read_text())


def test_the_file_carries_runs_settings_and_binds_the_image_id(cli, tmp_path):
    code, out, err = cli(DEV_REF, "--gpus", "4,5")
    assert code == 0, err
    doc = _written(tmp_path)
    assert doc["image"] == DEV_ID  # no registry digest here: the ID, never the tag resolved again
    assert DEV_REF not in doc["image"] and doc["customizations"]["imagebuild"]["ref"] == DEV_REF
    assert doc["remoteUser"] == "ml"  # UID 1000 named from the image's /etc/passwd
    args = doc["runArgs"]
    assert args[args.index("--gpus") + 1] == '"device=4,5"'
    assert "--cpuset-cpus=56-111,168-223" in args and "--cpuset-mems=1" in args  # the GPUs' NUMA node
    assert "--shm-size=1007g" in args  # half the recorded host's memory, as run
    assert " ".join(args).count("--ulimit") == 2 and "memlock=-1" in args and "stack=67108864" in args
    assert "--network=host" in args and "io.imagebuild.devcontainer=1" in args
    assert not {"--user", "-v", "-w", "--name", "--rm"} & set(args)  # devcontainer.json's own keys, not runArgs
    assert doc["workspaceMount"] == "source=${localWorkspaceFolder},target=/workspace,type=bind"
    assert doc["workspaceFolder"] == "/workspace"
    assert doc["forwardPorts"] == [8888] and "JupyterLab" in doc["portsAttributes"]["8888"]["label"]
    assert out.strip() == f"wrote .devcontainer/devcontainer.json (image ID {DEV_ID}, remoteUser ml)"
    assert "memlock: unlimited (this engine accepted --ulimit memlock=-1 in a probe container)" in err.splitlines()
    containers = cli.holder["client"].containers
    assert len(containers.created) == 1 and containers.removed == ["c0"]  # one probe, removed
    assert containers.created[0]["network_mode"] == "none" and "device_requests" not in containers.created[0]


def test_a_registry_digest_is_preferred_to_the_id(cli, tmp_path):
    digest = "reg/pytorch@sha256:" + "c" * 64
    cli.holder["client"] = _Client(dev_digests=(digest,))
    code, out, err = cli(DEV_REF, "--memlock", "default")
    assert code == 0, err
    assert _written(tmp_path)["image"] == digest and digest in out


def test_memlock_refused_by_the_engine_is_left_out_and_said(cli, tmp_path):
    cli.holder["client"].containers.refuse_memlock = True
    code, _, err = cli(DEV_REF)
    assert code == 0, err
    args = _written(tmp_path)["runArgs"]
    assert "memlock=-1" not in args and "stack=67108864" in args
    lines = [ln for ln in err.splitlines() if ln.startswith("memlock:")]
    assert len(lines) == 1 and lines[0].startswith("memlock: the engine's default (this engine refused --ulimit "
                                                    "memlock=-1 in a probe container); ")
    assert _written(tmp_path)["customizations"]["imagebuild"]["memlock"] == "default"
    containers = cli.holder["client"].containers
    assert len(containers.created) == 2 and sorted(containers.removed) == ["c0", "c1"]  # both tries removed


@pytest.mark.parametrize("choice, has_memlock, said", [
    ("unlimited", True, "memlock: unlimited (--memlock unlimited, not probed"),
    ("default", False, "memlock: the engine's default (--memlock default"),
])
def test_memlock_by_option_starts_no_probe(cli, tmp_path, choice, has_memlock, said):
    cli.holder["client"].containers.refuse_memlock = True
    code, _, err = cli("--memlock", choice, DEV_REF)
    assert code == 0, err
    assert ("memlock=-1" in _written(tmp_path)["runArgs"]) is has_memlock
    assert [ln for ln in err.splitlines() if ln.startswith("memlock:")][0].startswith(said)
    assert cli.holder["client"].containers.created == []


@pytest.mark.parametrize("args, message", [
    ([RUNTIME_REF], f"error: devcontainer needs a dev image (JupyterLab, sshd, compilers): {RUNTIME_REF} is a "
                    "runtime image; choices: a -dev tag, or --matrix FILE"),
    (["reg/missing:1"], "error: image 'reg/missing:1' is not in the engine"),
    ([], "error: give a dev IMAGE (tag, reference or ID) or --matrix FILE"),
    ([DEV_REF, "--port", "70000"], "error: --port 70000: not a TCP port (1-65535)"),
    ([DEV_REF, "--only", "x"], "error: --only and --registry go with --matrix"),
    ([DEV_REF, "--shm-size", "lots"], "error: --shm-size 'lots': want a size such as 16g or 512m"),
    ([DEV_REF, "--memlock", "always"], "error: Invalid value for '--memlock': 'always' is not one of 'auto', "
                                       "'unlimited', 'default'."),
])
def test_bad_input_one_line_nothing_written(cli, tmp_path, args, message):
    code, out, err = cli(*args)
    assert code == 2 and out == ""
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(message), err
    assert "Traceback" not in err
    assert not (tmp_path / ".devcontainer").exists() and cli.holder["client"].containers.created == []


def test_an_image_user_without_a_passwd_entry_is_one_line(cli, tmp_path):
    cli.holder["client"].archives[DEV_ID] = _tar("passwd", b"root:x:0:0:root:/root:/bin/bash\n")
    code, _, err = cli(DEV_REF)
    assert code == 2
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        f"error: {DEV_REF}: cannot name its user for remoteUser: the image's USER 1000:1000 has no entry in its "
        "/etc/passwd"]
    assert not (tmp_path / ".devcontainer").exists()


def test_an_existing_file_is_kept_without_force(cli, tmp_path):
    mine = tmp_path / ".devcontainer" / "devcontainer.json"
    mine.parent.mkdir()
    mine.write_text('{"image": "mine"}\n')
    code, out, err = cli(DEV_REF)
    assert code == 2 and out == ""
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        "error: .devcontainer/devcontainer.json exists: leaving it as it is; --force replaces it (or --output DIR "
        "elsewhere)"]
    assert mine.read_text() == '{"image": "mine"}\n' and cli.holder["client"].containers.created == []
    code, _, err = cli("--force", DEV_REF)
    assert code == 0, err
    assert _written(tmp_path)["image"] == DEV_ID
    assert sorted(p.name for p in mine.parent.iterdir()) == ["devcontainer.json"]  # no .part left behind


def test_output_folder(cli, tmp_path):
    code, out, err = cli("--output", "proj", "--port", "6006", "--port", "8888", "-e", "A=1", DEV_REF)
    assert code == 0, err
    doc = _written(tmp_path / "proj")
    assert doc["forwardPorts"] == [6006, 8888] and doc["containerEnv"] == {"A": "1"}
    assert "then: devcontainer up --workspace-folder proj" in err


# the pure half ------------------------------------------------------------------------------------------------------

def test_run_args_are_runs_print_less_the_files_own_keys():
    settings = ContainerSettings(image="img", name="n", command=["x"], gpus=True, gpu_ids=("0",), shm_size="8g",
                                 network="host", mounts=(("/h", "/workspace", "rw"),), user="1:1",
                                 environment={"A": "1"}, working_dir="/workspace", cpuset_cpus="0-3")
    printed = shlex.split(" ".join(settings.docker_run_args()))
    mine = run_args(settings)
    assert [a for a in mine if a.startswith("--")] == [a for a in printed if a.startswith("--") and a not in
                                                        ("--rm", "--name", "--user", "--label")] + ["--label"]
    assert settings.docker_run_args()[settings.docker_run_args().index("--gpus") + 1] == mine[mine.index("--gpus") + 1]


def test_ipc_host_and_no_memlock():
    mine = run_args(ContainerSettings(image="i", name="n", ipc_host=True, memlock_unlimited=False, stack_bytes=None))
    assert mine == ["--ipc=host", "--network=none", "--label", "io.imagebuild.devcontainer=1"]


@pytest.mark.parametrize("passwd, user, name", [
    ("ml:x:1000:1000::/home/ml:/bin/bash\n", "1000:1000", "ml"),
    ("ml:x:1000:1000::/home/ml:/bin/bash\n", "1000", "ml"),
    ("", "ml", "ml"),
    ("", "", "root"),
])
def test_login_user(passwd, user, name):
    assert login_user(passwd, user) == name


def test_image_reference():
    assert image_reference(DEV_ID, []) == DEV_ID
    assert image_reference(DEV_ID, ["b@sha256:" + "2" * 64, "a@sha256:" + "1" * 64]) == "a@sha256:" + "1" * 64


def test_config_without_ports_or_env():
    doc = config(ContainerSettings(image="i", name="n"), image=DEV_ID, remote_user="ml", ports=(), name="x",
                 source={})
    assert "forwardPorts" not in doc and "containerEnv" not in doc and doc["updateRemoteUserUID"] is True


# run --ssh: the session environment snippet of launch/devaccess.py, run by a real sh ------------------------------

def test_ssh_sessions_get_the_images_environment_and_no_secret(tmp_path):
    import subprocess

    from imagebuild.launch import devaccess

    script = devaccess.SSHD_SCRIPT
    snippet = script[script.index('envs=""'):script.index('echo "imagebuild: ssh login user')]
    conf = tmp_path / "05-imagebuild-env.conf"
    snippet = snippet.replace("/etc/ssh/sshd_config.d/05-imagebuild-env.conf", str(conf))
    env = {"PATH": "/opt/venv/bin:/usr/bin:/bin", "VIRTUAL_ENV": "/opt/venv", "LANG": 'C"quoted',
           "IMAGEBUILD_SSH_KEYS": "ssh-ed25519 AAAA secret", "JUPYTER_TOKEN": "t0ken", "PASSWORD": "pw"}
    subprocess.run(["sh", "-euc", snippet], env=env, check=True)
    assert conf.read_text() == 'SetEnv "PATH=/opt/venv/bin:/usr/bin:/bin" "VIRTUAL_ENV=/opt/venv"\n'
    assert not {"IMAGEBUILD_SSH_KEYS", "JUPYTER_TOKEN", "PASSWORD"} & set(devaccess.SESSION_ENV)
