"""Container lifecycle of the smoke runner with a fake engine: settings, retries, and removal on every path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import docker
import pytest
from _fake_engine import FakeEngine
from click.testing import CliRunner

from imagebuild.engine import ContainerSettings
from imagebuild.errors import UsageError
from imagebuild.models import BaseSource, ImagePlan, OSInfo, ResolvedVariant, Versions
from imagebuild.smoke import runner, sides


class FakeContainer:
    def __init__(self, client, kw, fail_start=None):
        self.client = client
        self.kw = kw
        self.id = f"c{len(client.created)}"
        self.status = "created"
        self.attrs = {"State": {}}
        self.fail_start = fail_start
        self.removed = False

    def start(self):
        if self.fail_start:
            raise docker.errors.APIError(self.fail_start)
        self.status = "running"

    def reload(self):
        pass

    def logs(self, tail=20):
        return b""

    def remove(self, force=False, v=False):
        assert force
        self.removed = True


class FakeClient(FakeEngine):
    """The shared fake engine plus the container side the runner starts its containers with."""

    def __init__(self, labels=None, start_errors=(), missing=False, runtimes=None):
        super().__init__()
        self.created: list[FakeContainer] = []
        self.start_errors = list(start_errors)
        self.labels = labels if labels is not None else {"io.imagebuild.flavor": "runtime"}
        self.missing = missing
        self.runtimes = runtimes or {"runc": {}}
        self.containers = self

    def inspect(self, ref):
        return None if self.missing else {"Id": "sha256:" + "1" * 64, "Config": {"Labels": self.labels}}

    # containers.create

    def create(self, **kw):
        err = self.start_errors.pop(0) if self.start_errors else None
        c = FakeContainer(self, kw, err)
        self.created.append(c)
        return c

    def info(self):
        return {"Runtimes": self.runtimes}

    def close(self):
        pass


@pytest.fixture(autouse=True)
def _no_hpc_container(request, monkeypatch):
    """The enroot/Apptainer-mode container has its own tests (marked `hpc`); the others count only theirs."""
    if "hpc" not in request.keywords:
        every = sides.for_flavor
        monkeypatch.setattr(sides, "for_flavor", lambda flavor, sections=None: tuple(
            s for s in every(flavor, sections) if s.where != "hpc"))


def fake_popen(result: dict | None = None, wait_effect=None):
    """A Popen stand-in that writes the suite's --smoke-json result (or misbehaves on wait)."""
    calls = []

    class P:
        def __init__(self, cmd, **kw):
            calls.append(cmd)
            self.cmd = cmd
            self.pid = os.getpid()
            self.returncode = None
            path = Path(cmd[cmd.index("--smoke-json") + 1])
            if result is not None:
                path.write_text(json.dumps(result))

        def wait(self, timeout=None):
            if wait_effect is not None:
                wait_effect(timeout)
            self.returncode = 0
            return 0

        def poll(self):
            return self.returncode

    return P, calls


GOOD = {"passed": 2, "failed": 0, "skipped": 1,
        "checks": [{"name": "amp/amp_cpu_bf16", "status": "passed", "reason": "", "figures": {"mode": "cpu-bf16"},
                    "seconds": 1, "host": "docker://x"},
                   {"name": "gpu/gpu_available", "status": "skipped", "reason": "no GPU visible in the container",
                    "figures": {}, "seconds": 0, "host": "docker://x"},
                   {"name": "versions/python", "status": "passed", "reason": "", "figures": {}, "seconds": 0,
                    "host": "docker://x"}],
        "hosts": {"docker://x": {"flavor": "runtime", "docker_exec": 1, "probe_wall_seconds": 5.0,
                                 "probe": {"probe": {"seconds": 4.2}, "gpu": {"available": False}}}}}


@pytest.fixture(autouse=True)
def no_host_gpus(monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_SMOKE_GPUS", "0")


def test_container_kwargs_match_how_users_run_images():
    kw = ContainerSettings(image="img:1", name="ibdev-smoke-x", gpus=True).kwargs()
    assert kw["network_mode"] == "none" and kw["shm_size"] == "2g" and "ipc_mode" not in kw
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in kw["ulimits"]}
    assert limits == {"memlock": (-1, -1), "stack": (67108864, 67108864)}
    assert kw["device_requests"][0]["Count"] == -1 and kw["device_requests"][0]["Capabilities"] == [["gpu"]]
    assert kw["command"] == ["sleep", "infinity"] and "entrypoint" not in kw
    kw = ContainerSettings(image="img:1", name="n", ipc_host=True).kwargs()
    assert kw["ipc_mode"] == "host" and "shm_size" not in kw and "device_requests" not in kw
    assert "user" not in kw and ContainerSettings(image="i", name="n", user="12345:0").kwargs()["user"] == "12345:0"


def test_run_smoke_passes_expectations_and_removes_container(monkeypatch, tmp_path):
    client = FakeClient()
    P, calls = fake_popen(GOOD)
    monkeypatch.setattr(runner.subprocess, "Popen", P)
    tests = runner.run_smoke("img:1", None, {"torch": "2.9.1"}, client=client, junit_dir=tmp_path / "j",
                             result_dir=tmp_path / "r", require_gpu=True, perf=True, name_prefix="ibdev-smoke")
    assert (tests["passed"], tests["failed"], tests["skipped"]) == (2, 0, 1)
    assert tests["docker_exec"] == 1 and tests["probe_seconds"] == 4.2 and tests["flavor"] == "runtime"
    assert set(tests["checks"][0]) == {"name", "status", "reason", "figures"}
    cmd = calls[0]
    assert f"--hosts=docker://{tests['container']}" in cmd and tests["container"].startswith("ibdev-smoke-img-1-")
    assert cmd[cmd.index("--expect") + 1] == "torch=2.9.1"
    assert "--require-gpu" in cmd and "--perf" in cmd and cmd[cmd.index("--flavor") + 1] == "runtime"
    assert cmd[cmd.index("--junitxml") + 1].endswith("img-1.xml")
    doc = json.loads((tmp_path / "r" / "img-1.json").read_text())
    assert doc["probe"]["probe"]["seconds"] == 4.2
    # the second container: the same image as an arbitrary UID in group 0, without GPUs; both removed
    assert [c.removed for c in client.created] == [True, True]
    uid_kw = client.created[1].kw
    assert uid_kw["image"] == "img:1" and uid_kw["user"] == "12345:0" and "device_requests" not in uid_kw
    assert "user" not in client.created[0].kw
    assert cmd[cmd.index("--side") + 1] == f"arbitrary-uid={uid_kw['name']}"
    assert uid_kw["name"] == tests["side_containers"]["arbitrary-uid"]
    assert uid_kw["user"] == "12345:0" and "--side-error" not in cmd


def test_arbitrary_uid_container_that_does_not_start_fails_the_uid_checks(monkeypatch):
    client = FakeClient(start_errors=[None, "OCI runtime create failed: no such user"])
    P, calls = fake_popen(GOOD)
    monkeypatch.setattr(runner.subprocess, "Popen", P)
    runner.run_smoke("img:1", client=client)
    cmd = calls[0]
    assert "--side" not in cmd and "no such user" in cmd[cmd.index("--side-error") + 1]
    assert cmd[cmd.index("--side-error") + 1].startswith("arbitrary-uid=the image did not start as 12345:0")
    assert all(c.removed for c in client.created)


def test_extra_probes_reach_the_result(monkeypatch, tmp_path):
    host = dict(GOOD["hosts"]["docker://x"], extra_probes={
        "arbitrary-uid": {"doc": {"checks": [{"name": "uid.home_writable"}]}, "error": None, "wall": 2.5,
                          "where": "c-uid"},
        "root": {"doc": {"checks": []}, "error": None, "wall": 0.2, "where": "root@c"}})
    P, _ = fake_popen(dict(GOOD, hosts={"docker://x": host}))
    monkeypatch.setattr(runner.subprocess, "Popen", P)
    tests = runner.run_smoke("img:1", client=FakeClient(), result_dir=tmp_path)
    assert tests["extra_probe_seconds"] == {"arbitrary-uid": 2.5, "root": 0.2}
    doc = json.loads(Path(tests["result_json"]).read_text())
    assert doc["probe"]["extra_probes"]["arbitrary-uid"]["checks"][0]["name"] == "uid.home_writable"


def test_no_arbitrary_uid_container_when_not_asked(monkeypatch):
    client = FakeClient()
    P, calls = fake_popen(GOOD)
    monkeypatch.setattr(runner.subprocess, "Popen", P)
    runner.run_smoke("img:1", client=client, places=())
    assert len(client.created) == 1 and not [a for a in calls[0] if a.startswith("--side")]


def test_missing_image_is_one_failed_check():
    tests = runner.run_smoke("nope:1", client=FakeClient(missing=True))
    assert tests["failed"] == 1 and tests["checks"][0]["name"] == "image/present"
    assert "not found" in tests["checks"][0]["reason"]


def test_refused_ulimit_is_retried_without_it_and_noted(monkeypatch):
    client = FakeClient(start_errors=["error setting rlimits for ready process: error setting rlimit type 8"])
    monkeypatch.setattr(runner.subprocess, "Popen", fake_popen(GOOD)[0])
    tests = runner.run_smoke("img:1", client=client, places=())
    assert len(client.created) == 2 and all(c.removed for c in client.created)
    assert [u["Name"] for u in client.created[1].kw["ulimits"]] == ["stack"]
    assert tests["notes"] == ["engine refused ulimit memlock=-1: ran without it"]
    assert tests["failed"] == 0


def test_gpu_request_failure_falls_back(monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_SMOKE_GPUS", "")
    client = FakeClient(runtimes={"nvidia": {}},
                        start_errors=['could not select device driver "" with capabilities: [[gpu]]'])
    monkeypatch.setattr(runner.subprocess, "Popen", fake_popen(GOOD)[0])
    tests = runner.run_smoke("img:1", client=client)
    assert "device_requests" in client.created[0].kw and "device_requests" not in client.created[1].kw
    assert tests["gpus_requested"] is False and "GPU request failed" in tests["notes"][0]


def test_start_failure_removes_the_created_container():
    client = FakeClient(start_errors=["unable to find user ml: no matching entries in passwd file"])
    tests = runner.run_smoke("img:1", client=client)
    assert tests["failed"] == 1 and "unable to find user ml" in tests["checks"][0]["reason"]
    assert client.created[0].removed


def test_timeout_kills_suite_and_removes_container(monkeypatch):
    client = FakeClient()

    def wait(timeout):
        raise subprocess.TimeoutExpired("pytest", timeout)

    killed = []
    monkeypatch.setattr(runner, "_kill_group", lambda p: killed.append(p))
    monkeypatch.setattr(runner.subprocess, "Popen", fake_popen(None, wait)[0])
    tests = runner.run_smoke("img:1", client=client, timeout=5)
    assert tests["checks"][0]["name"] == "suite/timeout" and tests["failed"] == 1
    assert killed and client.created[0].removed


def test_ctrl_c_removes_container_and_propagates(monkeypatch):
    client = FakeClient()

    def wait(timeout):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_kill_group", lambda p: None)
    monkeypatch.setattr(runner.subprocess, "Popen", fake_popen(None, wait)[0])
    with pytest.raises(KeyboardInterrupt):
        runner.run_smoke("img:1", client=client)
    assert client.created[0].removed


def test_sigterm_removes_container_and_restores_handler(monkeypatch):
    client = FakeClient()
    before = signal.getsignal(signal.SIGTERM)

    def wait(timeout):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(runner, "_kill_group", lambda p: None)
    monkeypatch.setattr(runner.subprocess, "Popen", fake_popen(None, wait)[0])
    with pytest.raises(runner.Interrupted):
        runner.run_smoke("img:1", client=client)
    assert client.created[0].removed
    assert signal.getsignal(signal.SIGTERM) == before


def test_no_result_file_is_a_failure(monkeypatch, tmp_path):
    client = FakeClient()
    monkeypatch.setattr(runner.subprocess, "Popen", fake_popen(None)[0])
    tests = runner.run_smoke("img:1", client=client, result_dir=tmp_path)
    assert tests["checks"][0]["name"] == "suite/run" and tests["failed"] == 1
    assert client.created[0].removed


def _plan_image(flavor="runtime", cuda="cpu"):
    osi = OSInfo("debian12", "debian", "12", "bookworm", "3.11", ("3.11",), "http://deb.debian.org/debian", "2.36")
    v = ResolvedVariant(
        key=f"2.13.0-{cuda}-py3.11-debian12", name="pytorch", registry="", cuda_tag="cpu", os=osi,
        versions=Versions(torch="2.13.0", cuda=cuda, python="3.11", os="debian12",
                          cudnn=None if cuda == "cpu" else "9.10.2.21"),
        base=BaseSource(kind="bootstrap"), torch_index_url=None, flavors=("base", "runtime"), tf32=True,
        gpu_archs=() if cuda == "cpu" else ("sm_80", "sm_90"), arch_list=(), min_driver=None,
        perf_min={"bf16_tflops": 600.0})
    return ImagePlan(id=f"{v.key}-{flavor}", tag=f"pytorch:{v.key}-{flavor}", flavor=flavor, parent=None, variant=v,
                     dockerfile="", build_args={}, context_files={}, labels={}, inputs_hash="h")


def test_expectations_for_plan_image():
    exp = runner.expectations_for(_plan_image())
    assert exp == {"torch": "2.13.0", "cuda": "cpu", "python": "3.11", "os": "debian12", "cudnn": "", "nccl": "",
                   "flavor": "runtime", "tf32": "true", "perf_min.bf16_tflops": "600.0"}
    exp = runner.expectations_for(_plan_image(cuda="12.8"))
    assert exp["cudnn"] == "9.10.2.21" and exp["gpu_archs"] == "sm_80,sm_90" and "nccl" not in exp


def test_matches_only():
    from imagebuild.plan.assemble import matches

    img = _plan_image()
    assert matches(img, "runtime") and matches(img, "*-cpu-*") and matches(img, "x,2.13")
    assert not matches(img, "dev")


def test_summary_table():
    text = runner.summary_table([("img:1", {"flavor": "runtime", "passed": 3, "failed": 1, "skipped": 2,
                                            "seconds": 8.04, "docker_exec": 1, "notes": ["n1"],
                                            "checks": [{"name": "versions/version[torch]", "status": "failed",
                                                        "reason": "torch: expected 2.9.1, found 2.13.0"}]})])
    lines = text.splitlines()
    assert lines[0].split() == ["IMAGE", "FLAVOR", "PASS", "FAIL", "SKIP", "SECONDS", "EXECS", "GPU"]
    assert lines[1].split() == ["img:1", "runtime", "3", "1", "2", "8.0", "1", "no"]
    assert "NOTE img:1: n1" in text
    assert "FAIL img:1 versions/version[torch]: torch: expected 2.9.1, found 2.13.0" in text


def test_test_command_image_exit_codes(monkeypatch):
    from imagebuild.commands import test as cmd

    seen = {}

    def fake_run(ref, flavor, expectations, **kw):
        seen.update(ref=ref, flavor=flavor, expectations=expectations, require_gpu=kw["require_gpu"])
        if kw.get("sections") is not None:
            seen["sections"] = kw["sections"]
        failed = 1 if expectations.get("torch") == "9.9" else 0
        return {"passed": 1, "failed": failed, "skipped": 0, "flavor": "runtime", "seconds": 1.0,
                "checks": [{"name": "versions/version[torch]", "status": "failed" if failed else "passed",
                            "reason": "torch: expected 9.9, found 2.13.0" if failed else "", "figures": {}}]}

    monkeypatch.setattr(runner, "run_smoke", fake_run)
    monkeypatch.setattr(runner, "docker_client", lambda: object())
    r = CliRunner().invoke(cmd.command, ["--image", "img:1", "--expect", "torch=2.13.0", "--require-gpu"],
                           standalone_mode=False)
    assert r.exception is None and r.return_value == 0
    assert seen == {"ref": "img:1", "flavor": None, "expectations": {"torch": "2.13.0"}, "require_gpu": True}
    r = CliRunner().invoke(cmd.command, ["--image", "img:1", "--expect", "torch=9.9"], standalone_mode=False)
    assert r.return_value == 1 and "FAIL img:1 versions/version[torch]" in r.output
    r = CliRunner().invoke(cmd.command, ["--image", "img:1", "--expect", "torch"], standalone_mode=False)
    assert isinstance(r.exception, UsageError)
    r = CliRunner().invoke(cmd.command, [], standalone_mode=False)
    assert isinstance(r.exception, UsageError)
    # --sections: only those probe sections (a partial run, so --image only: never recorded as a matrix pass)
    r = CliRunner().invoke(cmd.command, ["--image", "img:1", "--sections", "versions, compile"], standalone_mode=False)
    assert r.return_value == 0 and seen["sections"] == ("versions", "compile")
    for args, message in ((["--image", "img:1", "--sections", "versions,nope"], "--sections 'versions,nope': unknown "
                           "section nope; choices: system, hygiene,"),
                          (["--image", "img:1", "--sections", ","], "unknown section (none given); choices: system"),
                          (["--matrix", "images/cpu.yaml", "--sections", "versions"], "--sections goes with --image")):
        r = CliRunner().invoke(cmd.command, args, standalone_mode=False)
        assert isinstance(r.exception, UsageError) and message in str(r.exception), (args, r.exception)


def test_test_command_matrix_tests_by_image_id_and_keeps_passes(monkeypatch, tmp_path):
    """`test --matrix` tests the image carrying the planned inputs hash, by ID; a second run is up to date (no
    container), --retest runs again, another --expect is its own result, a failure is never up to date."""
    from imagebuild.commands import test as cmd
    from imagebuild.models import Plan

    images = [_plan_image("base"), _plan_image("runtime")]
    images[0].inputs_hash = "h-base"
    monkeypatch.chdir(tmp_path)
    matrix = tmp_path / "cpu.yaml"
    matrix.write_text("x: 1\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: Plan(str(matrix), images))
    engine = FakeEngine()
    runtime_id = engine.add_image(images[1].tag, {"io.imagebuild.inputs-hash": "h"})
    runs = []
    monkeypatch.setattr(runner, "docker_client", lambda: engine)
    monkeypatch.setattr(runner, "host_where", lambda client: "cpu")
    monkeypatch.setattr(runner, "run_smoke", lambda ref, flavor, exp, **kw: runs.append((ref, flavor, exp, kw))
                        or {"passed": 1, "failed": 0, "skipped": 0, "checks": []})
    args = ["--matrix", str(matrix), "--only", "runtime", "--expect", "user=ml", "--report-dir",
            str(tmp_path / "report")]
    r = CliRunner().invoke(cmd.command, args, standalone_mode=False)
    assert r.exception is None, r.output
    assert r.return_value == 0 and len(runs) == 1
    ref, flavor, exp, kw = runs[0]
    assert ref == runtime_id and flavor == "runtime" and exp["torch"] == "2.13.0" and exp["user"] == "ml"
    assert kw["label"] == images[1].tag
    report = (tmp_path / "report" / "build-report.json").read_text()
    assert images[1].tag in report and runtime_id in report
    r = CliRunner().invoke(cmd.command, args, standalone_mode=False)
    assert r.return_value == 0 and len(runs) == 1 and "up to date:" in r.output
    assert "(up to date," in (tmp_path / "report" / "build-report.md").read_text()
    r = CliRunner().invoke(cmd.command, [*args, "--retest"], standalone_mode=False)
    assert r.return_value == 0 and len(runs) == 2
    r = CliRunner().invoke(cmd.command, [*args, "--expect", "user=root"], standalone_mode=False)
    assert r.return_value == 0 and len(runs) == 3
    monkeypatch.setattr(runner, "run_smoke", lambda ref, flavor, exp, **kw: runs.append(ref)
                        or {"passed": 0, "failed": 1, "skipped": 0, "checks": [
                            {"name": "x", "status": "failed", "reason": "broken", "figures": {}}]})
    assert CliRunner().invoke(cmd.command, [*args, "--retest"], standalone_mode=False).return_value == 1
    assert CliRunner().invoke(cmd.command, args, standalone_mode=False).return_value == 1
    assert len(runs) == 5
    # the base image was never built: one failed check saying why, no container started
    r = CliRunner().invoke(cmd.command, ["--matrix", str(matrix), "--only", "base"], standalone_mode=False)
    assert r.return_value == 1 and "not in the record" in r.output and len(runs) == 5


@pytest.mark.hpc
def test_hpc_container_is_started_as_enroot_would_and_named_to_the_suite(monkeypatch):
    """A runtime image gets a third container: unknown UID/GID, read-only root, writable exec tmpfs for /tmp and
    HOME, the hostile host environment; the suite learns its name and user; all three are removed."""
    client = FakeClient()
    P, calls = fake_popen(GOOD)
    monkeypatch.setattr(runner.subprocess, "Popen", P)
    runner.run_smoke("img:1", client=client)
    assert len(client.created) == 3 and all(c.removed for c in client.created)
    hpc = client.created[2].kw
    assert hpc["user"] == "23456:23456" and hpc["read_only"] is True
    assert "exec" in hpc["tmpfs"]["/tmp"].split(",") and "uid=23456" in hpc["tmpfs"]["/home/researcher"]
    assert hpc["environment"]["PYTHONPATH"].startswith("/cm/shared") and hpc["environment"]["HOME"] == "/home/researcher"
    cmd = calls[0]
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--side"] == [
        f"arbitrary-uid={client.created[1].kw['name']}", f"hpc={hpc['name']}"]


@pytest.mark.hpc
def test_no_hpc_container_for_a_base_image(monkeypatch):
    client = FakeClient(labels={"io.imagebuild.flavor": "base"})
    P, calls = fake_popen(GOOD)
    monkeypatch.setattr(runner.subprocess, "Popen", P)
    runner.run_smoke("img:1", client=client)
    assert len(client.created) == 2 and not [a for a in calls[0] if a.startswith("hpc=")]



class _ArmImageClient(FakeClient):
    """An arm64 image on an x86_64 engine: the suite runs it through QEMU."""

    def inspect(self, ref):
        return dict(super().inspect(ref), Os="linux", Architecture="arm64")

    def info(self):
        return dict(super().info(), Architecture="x86_64")


@pytest.mark.hpc
def test_every_container_of_an_emulated_image_runs_on_its_platform_and_the_result_says_so(monkeypatch):
    """Main, arbitrary-UID and hpc containers of an arm64 image on an amd64 engine all ask for linux/arm64 and QEMU's
    Grace-like CPU (the hpc side lost both once: its settings are built apart); a native image's ask for neither."""
    client = _ArmImageClient()
    P, _ = fake_popen(GOOD)
    monkeypatch.setattr(runner.subprocess, "Popen", P)
    monkeypatch.setattr(runner, "emulation_note", lambda uname: f"QEMU 10.0.13 for {uname}")
    tests = runner.run_smoke("img:1", client=client)
    assert len(client.created) == 3
    assert [c.kw.get("platform") for c in client.created] == ["linux/arm64"] * 3
    # QEMU emulates a Grace-like CPU (128-bit SVE) in every one of them
    assert [c.kw["environment"]["QEMU_CPU"] for c in client.created] == ["max,sve-default-vector-length=16"] * 3
    assert client.created[2].kw["environment"]["PYTHONPATH"].startswith("/cm/shared")  # still the hpc side
    assert tests["emulated"] == "linux/arm64"
    assert any(n.startswith("linux/arm64 under emulation (QEMU 10.0.13 for aarch64)") for n in tests["notes"])
    assert any("QEMU_CPU=max,sve-default-vector-length=16" in n for n in tests["notes"])
    native = FakeClient()
    runner.run_smoke("img:1", client=native)
    assert len(native.created) == 3
    assert all("platform" not in c.kw and "QEMU_CPU" not in c.kw.get("environment", {}) for c in native.created)
