"""Another platform than the engine's: binfmt_misc read under a root, the one-line preflight, the bootstrap's and
buildx's arguments per architecture."""

import dataclasses
from pathlib import Path

import pytest
from _support import DEBIAN12, image, variant

from imagebuild.builder import bootstrap
from imagebuild.builder.backends.buildkit.argv import BuildxCall, buildx_argv
from imagebuild.builder.backends.buildkit.checks import inspect_platforms
from imagebuild.compat import load as load_tables
from imagebuild.host.binfmt import missing_emulation
from imagebuild.models import BaseSource
from imagebuild.pipeline.platforms import PlatformUnavailable, check_platforms, engine_platform

TABLES = load_tables()
GOOD = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\noffset 0\n"


def _root(tmp_path: Path, entry: str | None = GOOD, mounted: bool = True) -> Path:
    folder = tmp_path / "proc/sys/fs/binfmt_misc"
    folder.mkdir(parents=True)
    if mounted:
        (folder / "register").write_text("")
    if entry is not None:
        (folder / "qemu-aarch64").write_text(entry)
    return tmp_path


def test_binfmt_states(tmp_path):
    assert missing_emulation("aarch64", _root(tmp_path / "a")) is None
    assert "not mounted" in missing_emulation("aarch64", _root(tmp_path / "b", mounted=False))
    assert "no qemu-aarch64 handler" in missing_emulation("aarch64", _root(tmp_path / "c", entry=None))
    assert "lacks the F flag (flags PO)" in missing_emulation("aarch64", _root(tmp_path / "d", GOOD.replace("POF", "PO")))
    assert "disabled" in missing_emulation("aarch64", _root(tmp_path / "e", GOOD.replace("enabled", "disabled")))


def _arm(flavor="base", parent=None, **kw):
    base = BaseSource(kind="bootstrap", mirror="http://deb.debian.org/debian")
    var = dataclasses.replace(variant(key="2.13.0-cpu-py3.11-debian12-arm64", base=base), platform="linux/arm64")
    return image(var.key, flavor, parent, var=var, **kw)


def test_engine_platform_from_docker_info():
    assert engine_platform(TABLES, "x86_64") == "linux/amd64"
    assert engine_platform(TABLES, "aarch64") == "linux/arm64"
    assert engine_platform(TABLES, None) == "linux/amd64"
    # the one lookup of a machine's platform (the smoke runner asks it too): None where no row names the machine
    assert TABLES.machine_platform("aarch64") == TABLES.machine_platform("arm64") == "linux/arm64"
    assert TABLES.machine_platform("riscv64") is None and TABLES.machine_platform(None) is None


def test_classic_refuses_another_platform_in_one_line(tmp_path):
    with pytest.raises(PlatformUnavailable) as err:
        check_platforms([_arm()], TABLES, "linux/amd64", buildkit=False, builder=None, root=_root(tmp_path))
    assert str(err.value).startswith("the classic builder builds only the engine's platform (linux/amd64); 1 "
                                     "selected image(s) are linux/arm64 (2.13.0-cpu-py3.11-debian12-arm64-base)")
    assert "\n" not in str(err.value)
    check_platforms([_arm()], TABLES, "linux/arm64", buildkit=False, builder=None, root=_root(tmp_path / "x"))


def test_emulated_buildkit_needs_binfmt(tmp_path):
    check_platforms([_arm()], TABLES, "linux/amd64", buildkit=True, builder=None, root=_root(tmp_path / "ok"))
    with pytest.raises(PlatformUnavailable) as err:
        check_platforms([_arm()], TABLES, "linux/amd64", buildkit=True, builder=None,
                        root=_root(tmp_path / "no", entry=None))
    assert "no qemu-aarch64 handler is registered" in str(err.value)
    assert "`sudo scripts/binfmt.sh aarch64`" in str(err.value) and "--builder NAME" in str(err.value)


def test_a_builder_without_the_platform_is_refused(tmp_path):
    with pytest.raises(PlatformUnavailable, match="buildx builder 'farm' has no linux/arm64 node"):
        check_platforms([_arm()], TABLES, "linux/amd64", buildkit=True, builder="farm",
                        builder_platforms=("linux/amd64",), docker_driver=False, root=_root(tmp_path))


def test_native_builder_still_needs_qemu_for_the_bootstrap_but_not_for_a_child(tmp_path):
    base = _arm()
    child = _arm("runtime", base)
    no_qemu = _root(tmp_path, entry=None)
    native = dict(buildkit=True, builder="farm", builder_platforms=("linux/amd64", "linux/arm64"),
                  docker_driver=False, root=no_qemu)
    with pytest.raises(PlatformUnavailable, match="need its root filesystem bootstrap"):
        check_platforms([base, child], TABLES, "linux/amd64", **native)
    check_platforms([child], TABLES, "linux/amd64", **native)


def test_transformer_engine_for_arm64_only_on_a_native_builder(tmp_path):
    te = _arm("runtime", _arm(), te_wheel=object())
    with pytest.raises(PlatformUnavailable, match="compiles only on a native linux/arm64 builder"):
        check_platforms([te], TABLES, "linux/amd64", buildkit=True, builder=None, root=_root(tmp_path / "a"))
    check_platforms([te], TABLES, "linux/amd64", buildkit=True, builder="farm",
                    builder_platforms=("linux/arm64",), docker_driver=False, root=_root(tmp_path / "b"))


def test_inspect_platforms_reads_every_node():
    text = ("Name: farm\nDriver: remote\n\nNodes:\nName: a\nPlatforms: linux/amd64*, linux/amd64/v2\n"
            "Name: b\nPlatforms: linux/arm64*, linux/arm/v7\n")
    assert inspect_platforms(text) == ("linux/amd64", "linux/amd64/v2", "linux/arm64", "linux/arm/v7")


def test_buildx_argv_names_the_platform_only_when_asked():
    call = BuildxCall(context_dir=Path("/ctx"), dockerfile="Dockerfile", tag="t:1", build_args={}, labels={})
    assert "--platform" not in buildx_argv(call)
    argv = buildx_argv(dataclasses.replace(call, platform="linux/arm64"))
    assert argv[argv.index("--platform") + 1] == "linux/arm64"


def test_bootstrap_per_architecture(tmp_path):
    amd = bootstrap.spec_for(variant(base=BaseSource(kind="bootstrap"), osinfo=DEBIAN12))
    arm = bootstrap.spec_for(dataclasses.replace(variant(base=BaseSource(kind="bootstrap"), osinfo=DEBIAN12),
                                                 platform="linux/arm64"))
    assert (amd.architecture, arm.architecture) == ("amd64", "arm64")
    assert arm.hash() != amd.hash() and arm.tag != amd.tag
    cmd, _ = bootstrap._command("mmdebstrap", arm, tmp_path / "r.tar", tmp_path)
    assert "--architectures=arm64" in cmd
    config = bootstrap.bootstrap_config(arm, arm.hash(), "sha256:" + "0" * 64, 0, "mmdebstrap", arm.architecture)
    assert b'"architecture":"arm64"' in config.replace(b" ", b"")


def test_container_settings_carry_a_foreign_platform_only():
    from imagebuild.engine import ContainerSettings

    plain = ContainerSettings(image="i", name="n")
    assert "platform" not in plain.kwargs() and "--platform" not in plain.docker_run_args()
    arm = ContainerSettings(image="i", name="n", platform="linux/arm64")
    assert arm.kwargs()["platform"] == "linux/arm64"
    args = arm.docker_run_args()
    assert args[args.index("--platform") + 1] == "linux/arm64"


class _Info:
    def __init__(self, machine):
        self.machine = machine

    def info(self):
        return {"Architecture": self.machine} if self.machine else {}


def test_the_smoke_runner_knows_an_emulated_image():
    from imagebuild.smoke.runner import foreign_platform

    arm_image = {"Os": "linux", "Architecture": "arm64"}
    assert foreign_platform(_Info("x86_64"), arm_image) == "linux/arm64"
    assert foreign_platform(_Info("aarch64"), arm_image) is None
    assert foreign_platform(_Info("x86_64"), {"Os": "linux", "Architecture": "amd64"}) is None
    assert foreign_platform(_Info(None), arm_image) is None  # an engine that does not say: as before


def _with_interpreter(tmp_path: Path, version_line: str) -> Path:
    """A recorded handler whose interpreter is a link (as Debian's ARCH-binfmt-P) to a program carrying a version
    banner among its bytes; run, it would leave a marker file (it must never be run)."""
    root = _root(tmp_path, entry="enabled\ninterpreter /opt/qemu/aarch64-binfmt-P\nflags: POF\n")
    qemu = root / "opt" / "qemu"
    qemu.mkdir(parents=True)
    (qemu / "qemu-aarch64").write_bytes(b"#!/bin/sh\ntouch " + str(tmp_path / "ran").encode() + b"\nexit 0\n\0\0"
                                        + version_line.encode() + b"\nCopyright (c) QEMU\0\0")
    (qemu / "qemu-aarch64").chmod(0o755)
    (qemu / "aarch64-binfmt-P").symlink_to("qemu-aarch64")
    return root


def test_the_emulator_says_its_version_and_an_old_one_is_named(tmp_path):
    from imagebuild.host.binfmt import emulation_note, emulator_version

    new = _with_interpreter(tmp_path / "new", "qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)")
    assert emulator_version("aarch64", new) == "10.0.13"
    assert emulation_note("aarch64", new) == "QEMU 10.0.13"
    old = _with_interpreter(tmp_path / "old", "qemu-aarch64 version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)")
    assert emulation_note("aarch64", old).startswith("QEMU 7.2.22, older than 10.0: torch 2.13's aarch64 CPU "
                                                     "kernels crashed")
    assert emulation_note("aarch64", _root(tmp_path / "none", entry=None)) == "QEMU (version unknown)"
    silent = _with_interpreter(tmp_path / "silent", "no version here")
    assert emulator_version("aarch64", silent) is None
    # the interpreter is read, never run (a handler someone else registered is not ours to execute)
    assert not any(tmp_path.glob("*/ran")), list(tmp_path.glob("*/ran"))
    directory = _root(tmp_path / "dir", entry="enabled\ninterpreter /opt/qemu\nflags: POF\n")
    (directory / "opt" / "qemu").mkdir(parents=True)
    assert emulator_version("aarch64", directory) is None  # not a file: nothing read
