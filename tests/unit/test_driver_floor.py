"""The driver floor: the node's driver read from /proc/driver/nvidia/version or nvidia-smi (recorded outputs in
tests/unit/fixtures/driver/), compared with the image's io.imagebuild.min-driver label; `run` and `slurm` refuse an
image the driver cannot run (one `error:` line naming both versions, nothing started) unless --ignore-driver, and
never say "ok" for what they could not compare."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _fake_engine import FakeEngine

from imagebuild.launch import driver
from imagebuild.launch.driver import (
    DriverTooOld,
    HostDriver,
    judge,
    parse_proc_version,
    parse_smi,
    read_host_driver,
)

FIXTURES = Path(__file__).parent / "fixtures" / "driver"
CU13 = {"io.imagebuild.cuda": "13.0", "io.imagebuild.min-driver": "580.65.06", "io.imagebuild.flavor": "runtime"}
CU12 = {"io.imagebuild.cuda": "12.8", "io.imagebuild.min-driver": "525.60.13", "io.imagebuild.flavor": "runtime"}
CPU = {"io.imagebuild.cuda": "cpu", "io.imagebuild.flavor": "runtime"}


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


# -- reading the driver ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, version", [
    ("proc-version-x86_64.txt", "535.129.03"),
    ("proc-version-open-x86_64.txt", "580.82.07"),
    ("proc-version-open-aarch64.txt", "560.35.03"),
])
def test_proc_version_formats(name, version):
    assert parse_proc_version(_text(name)) == version


def test_proc_version_without_a_version_line():
    assert parse_proc_version("GCC version:  gcc version 12.3.0\n") is None
    assert parse_proc_version("") is None


def test_nvidia_smi_query_output():
    assert parse_smi(_text("smi-driver-version-8gpu.csv")) == "535.129.03"
    assert parse_smi("550.54.15\n550.54.14\n") == "550.54.14"  # the oldest when they differ


@pytest.mark.parametrize("name", ["smi-no-devices.txt", "smi-mismatch.txt", "smi-no-driver.txt"])
def test_nvidia_smi_failure_texts_name_no_driver(name):
    assert parse_smi(_text(name)) is None


def _host(tmp_path: Path, proc: str | None = None, smi: str | None = None) -> Path:
    root = tmp_path / "node"
    (root / "proc").mkdir(parents=True)
    if proc is not None:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(_text(proc))
    if smi is not None:
        (root / "nvidia-smi").mkdir()
        (root / "nvidia-smi/driver-version.csv").write_text(_text(smi))
    return root


def test_read_under_a_recorded_root(tmp_path):
    found = read_host_driver(_host(tmp_path, proc="proc-version-open-x86_64.txt"))
    assert found == HostDriver("580.82.07", "/proc/driver/nvidia/version")
    other = tmp_path / "o"
    other.mkdir()
    found = read_host_driver(_host(other, smi="smi-driver-version-8gpu.csv"))
    assert found.version == "535.129.03" and found.source.startswith("nvidia-smi (recorded")


def test_live_root_falls_back_to_nvidia_smi():
    """On this host (no /proc/driver/nvidia here): nvidia-smi's answer, or why there is none."""
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this host has an NVIDIA driver")
    assert read_host_driver(smi=lambda: ("550.54.15", "nvidia-smi")) == HostDriver("550.54.15", "nvidia-smi")
    none = read_host_driver(smi=lambda: (None, "nvidia-smi not found"))
    assert none.version is None and "nvidia-smi not found" in none.source


# -- the verdict ----------------------------------------------------------------------------------------------------

def test_new_enough_driver_is_ok_and_names_both():
    v = judge(CU12, "img", HostDriver("535.129.03", "/proc/driver/nvidia/version"))
    assert v.status == "ok" and "535.129.03" in v.message and ">= 525.60.13" in v.message


def test_older_driver_is_refused_naming_both_versions():
    v = judge(CU13, "img", HostDriver("535.129.03", "/proc/driver/nvidia/version"))
    assert v.status == "refused"
    assert "580.65.06" in v.message and "535.129.03" in v.message and "--ignore-driver" in v.message


def test_version_compare_is_numeric():
    assert judge({**CU12, "io.imagebuild.min-driver": "525.60.13"}, "i", HostDriver("525.105.17", "x")).status == "ok"
    assert judge({**CU12, "io.imagebuild.min-driver": "525.60.13"}, "i", HostDriver("525.60.9", "x")).status \
        == "refused"


def test_forward_compat_package_runs_on_an_older_datacenter_driver():
    labels = {**CU13, "io.imagebuild.forward-compat": "cuda-compat-13-0 (apt_packages.base)",
              "io.imagebuild.forward-compat-min-driver": "535.54.03"}
    v = judge(labels, "img", HostDriver("535.129.03", "x"))
    assert v.status == "compat" and "data-center GPUs only" in v.message
    assert judge(labels, "img", HostDriver("525.60.13", "x")).status == "refused"


def test_no_driver_on_the_host():
    none = HostDriver(None, "no /proc/driver/nvidia/version, nvidia-smi not found")
    assert judge(CPU, "img", none).status == "silent" and judge(CPU, "img", none).message == ""
    v = judge(CU13, "img", none)
    assert v.status == "not checked" and "not checked" in v.message and "ok" not in v.message.split()


def test_an_image_without_the_label_is_not_checked():
    v = judge({"io.imagebuild.cuda": "12.8"}, "img", HostDriver("535.129.03", "x"))
    assert v.status == "not checked" and "io.imagebuild.min-driver" in v.message
    assert judge({}, "img", HostDriver("535.129.03", "x")).status == "not checked"
    assert judge({**CU12, "io.imagebuild.min-driver": "new"}, "img", HostDriver("535.129.03", "x")).status \
        == "not checked"


def test_enforce_raises_unless_ignored():
    host = HostDriver("535.129.03", "x")
    said: list[str] = []
    with pytest.raises(DriverTooOld, match="needs NVIDIA driver >= 580.65.06"):
        driver.enforce(CU13, "img", host, False, said.append)
    assert driver.enforce(CU13, "img", host, True, said.append).status == "refused"
    assert said and said[-1].startswith("warning:") and "--ignore-driver" in said[-1]


# -- through the commands -------------------------------------------------------------------------------------------

class _Client(FakeEngine):
    def __init__(self) -> None:
        super().__init__()
        self.add_image("reg/pt:cu13-runtime", CU13, image_id="sha256:" + "c" * 64)
        self.add_image("reg/pt:cpu-runtime", CPU, image_id="sha256:" + "d" * 64)
        self.created: list[object] = []
        self.containers = self

    def create(self, **kw: object) -> None:
        self.created.append(kw)
        raise AssertionError("a container was created")

    def info(self) -> dict[str, object]:
        return {"Runtimes": {"runc": {}}}


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    client = _Client()
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: client)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "nohome"))
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["imagebuild", *args])
        from imagebuild.cli import main

        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        return int(exc.value.code or 0), out.out, out.err

    run.client = client  # type: ignore[attr-defined]
    return run


def test_run_refuses_before_starting(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_HOST_ROOT", str(_host(tmp_path, proc="proc-version-x86_64.txt")))
    code, out, err = cli("run", "--no-workspace", "reg/pt:cu13-runtime", "--", "python")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and out == "" and len(errors) == 1, err
    assert "580.65.06" in errors[0] and "535.129.03" in errors[0] and "--ignore-driver" in errors[0]
    assert cli.client.created == []


def test_run_ignore_driver_goes_on(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_HOST_ROOT", str(_host(tmp_path, proc="proc-version-x86_64.txt")))
    code, out, err = cli("run", "--ignore-driver", "--print", "--no-workspace", "reg/pt:cu13-runtime")
    assert code == 0 and "docker run" in out and "warning:" in err and "error:" not in err


def test_run_on_a_cpu_node(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_HOST_ROOT", str(_host(tmp_path)))
    code, _, err = cli("run", "--print", "--no-workspace", "reg/pt:cpu-runtime")
    assert code == 0 and "driver" not in err  # a CPU image: nothing to check, nothing said
    code, _, err = cli("run", "--print", "--no-workspace", "reg/pt:cu13-runtime")
    assert code == 0 and "driver: not checked" in err and " ok" not in err


def test_slurm_reads_the_engines_labels_and_the_node_tree(cli, tmp_path):
    root = _host(tmp_path, proc="proc-version-x86_64.txt")
    code, out, err = cli("slurm", "--host-root", str(root), "--no-workspace", "reg/pt:cu13-runtime", "--", "python")
    assert code == 2 and out == "" and "error:" in err and "580.65.06" in err and "535.129.03" in err
    code, out, err = cli("slurm", "--host-root", str(root), "--ignore-driver", "--no-workspace",
                         "reg/pt:cu13-runtime", "--", "python")
    assert code == 0 and "#SBATCH" in out and "warning:" in err


def test_slurm_without_readable_labels_says_not_checked(tmp_path):
    said: list[str] = []
    root = _host(tmp_path, proc="proc-version-open-x86_64.txt")
    v = driver.check_slurm("/lustre/pt.sqsh", None, root, False, said.append, labels_of=lambda key: None)
    assert v.status == "not checked" and said and "not checked" in said[0] and "580.82.07" in said[0]
    ok = driver.check_slurm("reg/pt:1", "sha256:" + "e" * 64, root, False, said.append,
                            labels_of=lambda key: CU13 if key.startswith("sha256:") else None)
    assert ok.status == "ok"  # the floor of the image ID the job starts, not of the tag
