"""scripts/binfmt.sh against a fake binfmt_misc folder (IMAGEBUILD_BINFMT_DIR): the honest cases and the hostile ones.

The fake models the kernel's interface (fs/binfmt_misc.c): each entry a file `enabled|disabled`, `interpreter PATH`,
`flags: POCF`, `offset N`, `magic HEX`, `mask HEX`; a `status` file; `register` a FIFO whose reader collects every
registration line the script writes. After a run, `settle()` applies what the script wrote, in the kernel's order
(writes of -1/0/1 to an entry or to status, registrations), so the next run sees what the kernel would show.
Every existing interpreter is a script that would write a marker file: no test may find the marker (the script
compares the interpreter's bytes with its own QEMU, never runs it). A last test uses the real kernel interface with a
throwaway name and a magic no file has, and touches nothing else (qemu-aarch64 is compared before and after).
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/binfmt.sh"
QEMU = "10.0.13"
MAGIC = "7f454c460201010000000000000000000200b700"
MASK = "ffffffffffffff00fffffffffffffffffeffffff"
CONF = (":qemu-aarch64:M::" + "".join(f"\\x{MAGIC[i:i + 2]}" for i in range(0, len(MAGIC), 2)) + ":"
        + "".join(f"\\x{MASK[i:i + 2]}" for i in range(0, len(MASK), 2)) + ":/usr/libexec/qemu-binfmt/aarch64-binfmt-P:OPF")
ARM_MAGIC = "7f454c4601010100000000000000000002002800"  # qemu-arm: another architecture, never touched
ARM_MASK = "ffffffffffffff00fffffffffffffffffeffffff"
OLD_MASK = "ffffffffffffff00fffffffffffffffffeffffff"[:-2] + "fe"  # a looser mask: still matches aarch64 binaries


def _hex(text: str) -> str:
    return "".join(f"\\x{text[i:i + 2]}" for i in range(0, len(text), 2))


def _unhex(field: str) -> str:
    assert re.fullmatch(r"(\\x[0-9a-f]{2})*", field), field
    return field.replace("\\x", "")


def entry_text(state="enabled", interp="/usr/bin/qemu-aarch64-static", flags="F", offset=0, magic=MAGIC,
               mask: str | None = MASK) -> str:
    """An entry as the kernel prints it (flags in the kernel's order P, O, C, F)."""
    flags = "".join(f for f in "POCF" if f in flags)
    text = f"{state}\ninterpreter {interp}\nflags: {flags}\noffset {offset}\nmagic {magic}\n"
    return text + (f"mask {mask}\n" if mask else "")


def split_registrations(data: str) -> list[str]:
    """Registration lines as one reader may get them, run together: each is D name D type D offset D magic D mask D
    interpreter D flags, D its first character; flags are [POCF]*, so the next line starts after them."""
    lines = []
    while data:
        d, pos = data[0], 0
        for _ in range(6):
            pos = data.index(d, pos + 1)
        end = pos + 1
        while end < len(data) and data[end] in "POCF":
            end += 1
        lines.append(data[:end])
        data = data[end:]
    return lines


class FakeKernel:
    def __init__(self, folder: Path):
        self.dir = folder
        folder.mkdir(parents=True)
        os.mkfifo(folder / "register")
        (folder / "status").write_text("enabled\n")
        self.registrations: list[str] = []
        self._chunks: list[bytes] = []
        self._fd: int | None = None

    def add(self, name: str, **kw) -> str:
        text = entry_text(**kw)
        (self.dir / name).write_text(text)
        return text

    def entries(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.dir.iterdir()) if p.name != "register"}

    def start(self):
        """Hold the register FIFO open for reading and writing, without blocking: every write of the script lands
        in the pipe's buffer (registrations are a few hundred bytes; the buffer holds 64 KiB), nothing waits on a
        reader thread."""
        self._fd = os.open(self.dir / "register", os.O_RDWR | os.O_NONBLOCK)

    def settle(self, before: dict[str, str]):
        """Read what the script wrote, then apply the writes as the kernel would have: removals and disables of
        entries that existed, then each registration (a name registered again must have been removed first), then
        a 0/1 written to a name after its registration."""
        assert self._fd is not None
        chunks = []
        try:
            while True:
                try:
                    chunk = os.read(self._fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._fd)
            self._fd = None
        self._chunks = chunks
        self.registrations = split_registrations(b"".join(self._chunks).decode())
        status = (self.dir / "status").read_text()
        if status in ("0", "1"):
            (self.dir / "status").write_text("enabled\n" if status == "1" else "disabled\n")
        registered = {}
        for line in self.registrations:
            d = line[0]
            name, kind, offset, magic, mask, interp, flags = line[1:].split(d)
            assert kind == "M" and re.fullmatch(r"[POCF]*", flags)
            if "F" in flags:  # the kernel opens the interpreter when F is given
                assert Path(interp).exists(), interp
            registered[name] = entry_text("enabled", interp, flags, int(offset or 0), _unhex(magic),
                                          _unhex(mask) or None)
        for path in self.dir.iterdir():
            if path.name in ("register", "status"):
                continue
            text = path.read_text()
            if text in ("-1", "0", "1"):
                if path.name in registered:
                    assert path.name not in before or text != "1", path.name
                    continue
                assert text == "-1", f"{path.name}: {text} written to an entry the run did not register"
                path.unlink()
            else:
                assert path.name not in registered, f"{path.name} registered while it existed (EEXIST)"
        for name, text in registered.items():
            after = (self.dir / name).read_text() if (self.dir / name).exists() else ""
            if after == "0":
                text = text.replace("enabled\n", "disabled\n", 1)
            (self.dir / name).write_text(text)


@pytest.fixture
def env(tmp_path):
    kernel = FakeKernel(tmp_path / "binfmt_misc")
    tools = tmp_path / "tools"
    qdir = tools / f"qemu-{QEMU}"
    qdir.mkdir(parents=True)
    ours = qdir / "qemu-aarch64"
    ours.write_bytes(b"\x7fELF fake qemu-aarch64 " + QEMU.encode() + b"\n" * 64)
    ours.chmod(0o755)
    (qdir / "version").write_text(QEMU + "\n")
    conf = tmp_path / "binfmt.d"
    conf.mkdir()
    (conf / "qemu-aarch64.conf").write_text("# Debian's line\n" + CONF + "\n")
    marker = tmp_path / "EXECUTED"
    hostile = tmp_path / "old/qemu-aarch64-static"
    hostile.parent.mkdir()
    hostile.write_text(f"#!/bin/sh\ntouch {marker}\necho 'qemu-aarch64 version {QEMU} (Debian)'\n")
    hostile.chmod(0o755)
    state = tmp_path / "var/binfmt.state"
    e = dict(os.environ, IMAGEBUILD_BINFMT_DIR=str(kernel.dir), IMAGEBUILD_TOOLS_DIR=str(tools),
             IMAGEBUILD_BINFMT_CONF_DIR=str(conf), IMAGEBUILD_BINFMT_STATE=str(state),
             IMAGEBUILD_DEBIAN_MIRROR="http://127.0.0.1:9/none")  # a fetch would fail: nothing may be downloaded

    class Env:
        pass

    x = Env()
    x.kernel, x.ours, x.link, x.marker, x.hostile, x.state, x.tmp = (
        kernel, ours, qdir / "aarch64-binfmt-P", marker, hostile, state, tmp_path)

    def run(*args, **more):
        before = kernel.entries()
        kernel.start()
        p = subprocess.run(["bash", str(SCRIPT), *args], env={**e, **more}, capture_output=True, text=True,
                           timeout=60)
        kernel.settle(before)
        return p

    x.run = run
    yield x
    assert not marker.exists(), "an existing handler's interpreter was executed"


def ours_line(x) -> str:
    return f":qemu-aarch64:M:0:{_hex(MAGIC)}:{_hex(MASK)}:{x.link}:OPF"


def one_error(p) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("binfmt: error: "), p.stderr
    return lines[0]


# --- the honest cases ------------------------------------------------------------------------------------------------

def test_nothing_registered_registers_then_unchanged(env):
    env.kernel.add("qemu-arm", magic=ARM_MAGIC, mask=ARM_MASK, interp="/usr/bin/qemu-arm")
    arm = env.kernel.entries()["qemu-arm"]
    assert env.run("--check").returncode == 1
    p = env.run()
    assert p.returncode == 0, p.stderr
    assert env.kernel.registrations == [ours_line(env)]
    assert "registered qemu-aarch64" in p.stdout
    assert env.kernel.entries()["qemu-aarch64"] == entry_text(interp=str(env.link), flags="POF")
    assert env.kernel.entries()["qemu-arm"] == arm  # another architecture's handler: untouched
    assert "ours\tqemu-aarch64\t" + str(env.link) in env.state.read_text()
    before = env.kernel.entries()
    p = env.run()
    assert p.returncode == 0 and "unchanged" in p.stdout and "nothing to change" in p.stdout, p.stdout
    assert env.kernel.registrations == [] and env.kernel.entries() == before
    assert env.run("--check").returncode == 0
    # --restore removes what it registered and leaves the host as it was: nothing for aarch64
    p = env.run("--restore")
    assert p.returncode == 0, p.stderr
    assert "qemu-aarch64" not in env.kernel.entries() and env.kernel.entries()["qemu-arm"] == arm
    assert not env.state.exists()
    assert "nothing to restore" in env.run("--restore").stdout


def test_ours_from_another_checkout_unchanged(env):
    """The same bytes under another path (another checkout's .tools), F flag: good, nothing written or saved."""
    other = env.tmp / "other-checkout/qemu-aarch64"
    other.parent.mkdir()
    other.write_bytes(env.ours.read_bytes())
    (other.parent / "aarch64-binfmt-P").symlink_to("qemu-aarch64")
    env.kernel.add("qemu-aarch64", interp=str(other.parent / "aarch64-binfmt-P"), flags="POF")
    before = env.kernel.entries()
    for args in ((), ("--check",)):
        p = env.run(*args)
        assert p.returncode == 0, p.stderr
        assert env.kernel.registrations == [] and env.kernel.entries() == before
    assert "unchanged" in p.stdout or p.stdout == ""
    assert not env.state.exists()


# --- hostile and edge cases -------------------------------------------------------------------------------------------

def test_disabled_refused_without_force_then_restored_exactly(env):
    original = env.kernel.add("qemu-aarch64", state="disabled", interp=str(env.hostile), flags="OC")
    before = env.kernel.entries()
    line = one_error(env.run())
    assert "qemu-aarch64" in line and "disabled" in line and "--force" in line
    assert env.kernel.entries() == before and env.kernel.registrations == [] and not env.state.exists()
    p = env.run("--force")
    assert p.returncode == 0, p.stderr
    assert env.kernel.registrations == [ours_line(env)]
    saved = env.state.read_text()
    assert f"saved\tqemu-aarch64\tdisabled\tOC\t0\t{MAGIC}\t{MASK}\t" in saved and str(env.hostile) in saved
    p = env.run("--restore")
    assert p.returncode == 0, p.stderr
    assert env.kernel.entries() == before and env.kernel.entries()["qemu-aarch64"] == original
    assert not env.state.exists()


def test_disabled_under_another_name_refused(env):
    env.kernel.add("aarch64", state="disabled", interp=str(env.hostile))
    before = env.kernel.entries()
    line = one_error(env.run())
    assert "aarch64" in line and "--force" in line
    assert env.kernel.entries() == before and env.kernel.registrations == []


def test_disabled_other_name_left_alone_when_ours_is_good(env):
    assert env.run().returncode == 0
    env.kernel.add("aarch64", state="disabled", interp=str(env.hostile))
    before = env.kernel.entries()
    p = env.run()
    assert p.returncode == 0 and "left alone" in p.stdout
    assert env.kernel.entries() == before


@pytest.mark.parametrize("other", ["qemu-aarch64-static", "aarch64"])
def test_same_magic_under_another_name_is_the_handler(env, other):
    original = env.kernel.add(other, interp=str(env.hostile), flags="F")
    p = env.run("--check")
    assert p.returncode == 1 and f"{other} (enabled" in p.stderr, p.stderr
    p = env.run()
    assert p.returncode == 0, p.stderr
    assert f"removed {other}" in p.stdout
    entries = env.kernel.entries()
    assert other not in entries and entries["qemu-aarch64"] == entry_text(interp=str(env.link), flags="POF")
    assert env.run("--check").returncode == 0
    assert env.run("--restore").returncode == 0
    assert env.kernel.entries() == {"status": "enabled\n", other: original}


def test_overlapping_mask_detected_and_only_it_removed_when_ours_is_good(env):
    assert env.run().returncode == 0
    ours = env.kernel.entries()["qemu-aarch64"]
    env.kernel.add("arm64-old", interp=str(env.hostile), flags="", mask=OLD_MASK)
    env.kernel.add("qemu-arm", magic=ARM_MAGIC, mask=ARM_MASK, interp="/usr/bin/qemu-arm")
    assert env.run("--check").returncode == 1
    p = env.run()
    assert p.returncode == 0 and "kept qemu-aarch64" in p.stdout, p.stdout + p.stderr
    assert env.kernel.registrations == []
    entries = env.kernel.entries()
    assert "arm64-old" not in entries and entries["qemu-aarch64"] == ours and "qemu-arm" in entries


@pytest.mark.parametrize("flags", ["", "PO", "POF"])
def test_older_handler_replaced_saved_and_restored_exactly(env, flags):
    """No F flag, or F with an interpreter that is not our QEMU's bytes (bookworm's 7.2 stand-in, which says it is
    10.0.13 when run: it is not run)."""
    env.kernel.add("qemu-arm", magic=ARM_MAGIC, mask=ARM_MASK, interp="/usr/bin/qemu-arm")
    link = env.tmp / "old/aarch64-binfmt-P"
    link.symlink_to(env.hostile.name)
    original = env.kernel.add("qemu-aarch64", interp=str(link), flags=flags)
    before = env.kernel.entries()
    p = env.run()
    assert p.returncode == 0, p.stderr
    assert "removed qemu-aarch64" in p.stdout and "replacing:" in p.stdout
    assert env.kernel.registrations == [ours_line(env)]
    # a second run and a re-run with an earlier registration of ours do not lose the saved handler
    assert "unchanged" in env.run().stdout
    p = env.run("--restore")
    assert p.returncode == 0, p.stderr
    assert env.kernel.registrations == [f":qemu-aarch64:M:0:{_hex(MAGIC)}:{_hex(MASK)}:{link}:{flags}"]
    assert env.kernel.entries() == before and env.kernel.entries()["qemu-aarch64"] == original


def test_two_handlers_restored(env):
    a = env.kernel.add("qemu-aarch64", interp=str(env.hostile), flags="PO")
    b = env.kernel.add("aarch64-binfmt", interp="/opt/qemu/aarch64", flags="", mask=None)
    assert env.run().returncode == 0
    assert set(env.kernel.entries()) == {"status", "qemu-aarch64"}
    p = env.run("--restore")
    assert p.returncode == 0, p.stderr
    assert env.kernel.entries() == {"status": "enabled\n", "qemu-aarch64": a, "aarch64-binfmt": b}


def test_restore_resumes_after_stopping_half_way(env):
    a = env.kernel.add("qemu-aarch64", interp=str(env.hostile), flags="PO")
    b = env.kernel.add("aarch64-binfmt", interp="/opt/qemu/aarch64", flags="", mask=None)
    assert env.run().returncode == 0
    (env.kernel.dir / "qemu-aarch64").write_text(a)  # ours removed and the first saved one back, then it stopped
    p = env.run("--restore")
    assert p.returncode == 0 and "as it was saved already" in p.stdout, p.stdout + p.stderr
    assert env.kernel.entries() == {"status": "enabled\n", "qemu-aarch64": a, "aarch64-binfmt": b}


def test_ours_registered_earlier_is_not_saved_over_the_original(env):
    """An upgrade of our QEMU replaces our own earlier registration: the state keeps the host's original."""
    original = env.kernel.add("qemu-aarch64", interp=str(env.hostile), flags="")
    old = env.tmp / "old-tools" / f"qemu-{QEMU}"
    old.mkdir(parents=True)
    (old / "qemu-aarch64").write_bytes(b"an earlier QEMU of ours")
    (old / "qemu-aarch64").chmod(0o755)
    (old / "version").write_text(QEMU + "\n")
    assert env.run(IMAGEBUILD_TOOLS_DIR=str(old.parent)).returncode == 0
    assert f"interpreter {old}/aarch64-binfmt-P" in env.kernel.entries()["qemu-aarch64"]
    p = env.run()
    assert p.returncode == 0 and "removed qemu-aarch64" in p.stdout, p.stderr
    assert env.state.read_text().count("saved\t") == 1 and str(env.hostile) in env.state.read_text()
    assert env.run("--restore").returncode == 0
    assert env.kernel.entries()["qemu-aarch64"] == original


def test_globally_disabled_binfmt_misc(env):
    (env.kernel.dir / "status").write_text("disabled\n")
    line = one_error(env.run())
    assert "disabled as a whole" in line and "--force" in line
    assert env.kernel.registrations == []
    assert env.run("--force").returncode == 0
    assert env.kernel.entries()["status"] == "enabled\n"
    assert env.run("--restore").returncode == 0
    assert env.kernel.entries() == {"status": "disabled\n"}


def _saved_state(env):
    env.kernel.add("qemu-aarch64", interp=str(env.hostile), flags="")
    assert env.run().returncode == 0
    return env.state.read_text()


@pytest.mark.parametrize("damage", ["edit", "truncate", "garbage", "header", "world-writable", "symlink", "empty",
                                    "open-folder"])
def test_damaged_state_one_error_nothing_changed(env, damage):
    text = _saved_state(env)
    if damage == "edit":
        env.state.write_text(text.replace(str(env.hostile), "/tmp/evil"))
    elif damage == "truncate":
        env.state.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        env.state.write_bytes(os.urandom(300))
    elif damage == "header":
        env.state.write_text(text.replace("state 1", "state 9"))
    elif damage == "world-writable":
        env.state.chmod(0o666)
    elif damage == "symlink":
        real = env.tmp / "elsewhere.state"
        real.write_text(text)
        env.state.unlink()
        env.state.symlink_to(real)
    elif damage == "empty":
        env.state.write_text("")
    elif damage == "open-folder":
        env.state.parent.chmod(0o777)
    # a run that would change something (our handler is gone) and --restore both refuse, changing nothing
    (env.kernel.dir / "qemu-aarch64").write_text("-1")
    env.kernel.start()
    env.kernel.settle({})
    state_before = env.state.read_bytes() if env.state.exists() else None
    for args in ((), ("--restore",)):
        before = env.kernel.entries()
        line = one_error(env.run(*args))
        assert "damaged" in line and str(env.state) in line
        assert env.kernel.entries() == before and env.kernel.registrations == []
        assert (env.state.read_bytes() if env.state.exists() else None) == state_before
    assert env.run("--check").returncode == 1  # --check reads no state: it says what is missing


def test_state_folder_open_to_others_refused_before_any_change(env):
    env.state.parent.mkdir(mode=0o777)
    env.state.parent.chmod(0o777)
    env.kernel.add("qemu-aarch64", interp=str(env.hostile), flags="")
    before = env.kernel.entries()
    line = one_error(env.run())
    assert "writable by others" in line
    assert env.kernel.entries() == before and env.kernel.registrations == [] and not env.state.exists()


def test_restore_refuses_when_our_entry_was_replaced_by_someone(env):
    _saved_state(env)
    (env.kernel.dir / "qemu-aarch64").write_text("-1")
    env.kernel.start()
    env.kernel.settle({})
    env.kernel.add("qemu-aarch64", interp="/usr/local/bin/someone-elses", flags="F")
    before, state = env.kernel.entries(), env.state.read_bytes()
    line = one_error(env.run("--restore"))
    assert "neither a handler this script registered nor the saved qemu-aarch64" in line
    assert env.kernel.entries() == before and env.state.read_bytes() == state


def test_restore_refuses_a_changed_interpreter_without_force(env):
    _saved_state(env)
    env.hostile.write_text(env.hostile.read_text() + "# changed\n")
    before = env.kernel.entries()
    line = one_error(env.run("--restore"))
    assert "not the file it was when saved" in line and "--force" in line
    assert env.kernel.entries() == before
    assert env.run("--restore", "--force").returncode == 0
    assert env.kernel.entries()["qemu-aarch64"] == entry_text(interp=str(env.hostile), flags="")


def test_restore_refuses_when_an_f_interpreter_is_gone(env):
    gone = env.tmp / "gone/qemu-aarch64"
    env.kernel.add("qemu-aarch64", interp=str(gone), flags="F")  # F: the kernel holds the file it opened
    p = env.run()
    assert p.returncode == 0 and "is gone" in p.stderr, p.stderr
    before, state = env.kernel.entries(), env.state.read_bytes()
    line = one_error(env.run("--restore"))
    assert "is gone" in line and env.kernel.entries() == before and env.state.read_bytes() == state


def test_malformed_entry_refuses(env):
    (env.kernel.dir / "weird").write_text("enabled\ninterpreter /x\nflags: Z\n")
    line = one_error(env.run())
    assert "weird" in line and env.kernel.registrations == []


def test_options(env):
    p = env.run("--bogus")
    assert p.returncode == 2 and "error: unknown option --bogus" in p.stderr
    p = env.run("--restore", "aarch64")
    assert p.returncode == 2
    p = env.run("--help")
    assert p.returncode == 0 and "--restore" in p.stdout


# --- the real kernel, with a throwaway name and a magic no file has ----------------------------------------------------

REAL = Path("/proc/sys/fs/binfmt_misc")


@pytest.mark.skipif(os.geteuid() != 0 or not (REAL / "register").exists() or not os.access(REAL / "register", os.W_OK),
                    reason="needs root and a mounted binfmt_misc")
def test_real_kernel_throwaway_handler(tmp_path):
    arch = "imagebuildtest" + uuid.uuid4().hex[:8]  # ^[a-z0-9_]+$, unique per run
    magic = "00" + b"IMAGEBUILDTEST".hex() + uuid.uuid4().hex  # starts with 0x00: never an ELF file (0x7f)
    mask = "ff" * (len(magic) // 2 - 1) + "fe"
    names = [f"qemu-{arch}", f"{arch}-foreign"]
    aarch64 = (REAL / "qemu-aarch64").read_text() if (REAL / "qemu-aarch64").exists() else None
    tools = tmp_path / "tools" / f"qemu-{QEMU}"
    tools.mkdir(parents=True)
    (tools / f"qemu-{arch}").write_bytes(b"not a program: never run, its magic matches no file")
    (tools / f"qemu-{arch}").chmod(0o755)
    (tools / "version").write_text(QEMU + "\n")
    conf = tmp_path / "binfmt.d"
    conf.mkdir()
    (conf / f"qemu-{arch}.conf").write_text(f":qemu-{arch}:M::{_hex(magic)}:{_hex(mask)}:/nonexistent:OC\n")
    marker = tmp_path / "EXECUTED"
    foreign = tmp_path / "foreign-interp"
    foreign.write_text(f"#!/bin/sh\ntouch {marker}\n")
    foreign.chmod(0o755)
    e = dict(os.environ, IMAGEBUILD_TOOLS_DIR=str(tmp_path / "tools"), IMAGEBUILD_BINFMT_CONF_DIR=str(conf),
             IMAGEBUILD_BINFMT_STATE=str(tmp_path / "state"), IMAGEBUILD_BINFMT_DIR=str(REAL))

    def run(*args):
        return subprocess.run(["bash", str(SCRIPT), *args, *([] if "--restore" in args else [arch])], env=e,
                              capture_output=True, text=True, timeout=60)

    try:
        (REAL / "register").write_text(f":{names[1]}:M::{_hex(magic)}:{_hex(mask)}:{foreign}:P")
        original = (REAL / names[1]).read_text()
        p = run()
        assert p.returncode == 0, p.stderr
        assert not (REAL / names[1]).exists()
        ours = (REAL / names[0]).read_text()
        assert ours.startswith("enabled\n") and "flags: OCF\n" in ours and f"qemu-{QEMU}/{arch}-binfmt-P" in ours
        assert "unchanged" in run().stdout and run("--check").returncode == 0
        p = run("--restore")
        assert p.returncode == 0, p.stderr
        assert not (REAL / names[0]).exists() and (REAL / names[1]).read_text() == original
    finally:
        for name in names:
            if (REAL / name).exists():
                (REAL / name).write_text("-1")
    assert not marker.exists()
    assert ((REAL / "qemu-aarch64").read_text() if (REAL / "qemu-aarch64").exists() else None) == aarch64
