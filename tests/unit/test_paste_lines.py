"""Issue 25: every line printed for a person to paste runs exactly what it says. The srun line and the sbatch script
are read back the way their readers read them (bash for the srun line and the script body, sbatch's own #SBATCH
parser for the header) and must give back exactly the argv and options asked for, whatever the image path, mounts,
working directory or job name hold; a value an #SBATCH line cannot hold is one `error:` line, exit 2."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _hosts import HOSTS, topo_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.errors import UsageError
from imagebuild.host import Fabric, read_fabric
from imagebuild.launch.slurm import SlurmRequest, make_slurm

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagebuild", "slurm", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": SRC, **(env or {})})


def _shell_words(text: str) -> list[str]:
    """What a POSIX shell makes of a pasted line: backslash-newline continuations removed (outside single quotes,
    where the shell removes them), then shlex's split into words."""
    out, quote, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if quote != "'" and ch == "\\" and text[i + 1:i + 2] == "\n":
            i += 2
            continue
        if quote != "'" and ch == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        if ch in "'\"" and quote in ("", ch):
            quote = "" if quote else ch
        out.append(ch)
        i += 1
    return shlex.split("".join(out))


def _bash_argv(text: str) -> list[str]:
    """The argv bash itself builds from `text` as the command line of a function that prints its arguments."""
    script = "srun() { printf '%s\\0' srun \"$@\"; }\n" + text
    with tempfile.TemporaryDirectory() as scratch:  # a line that is not quoted may write files (`>`): not here
        out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, cwd=scratch)
    return out.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def _sbatch_header(script: str) -> list[str]:
    """The options sbatch reads from a script's header, as Slurm's src/sbatch/opt.c does (`_opt_batch_script`,
    `_get_argument`): lines starting with #SBATCH; the header ends at the first line that is not a comment; each
    line split at unquoted whitespace, '…'/"…" group, backslash takes the next character, an unquoted # ends it."""
    options: list[str] = []
    for line in script.split("\n")[1:]:
        if not line.startswith("#SBATCH"):
            if line.strip() and not line.lstrip().startswith("#"):
                break
            continue
        rest, i = line[len("#SBATCH"):], 0
        while True:
            while i < len(rest) and rest[i].isspace():
                i += 1
            if i >= len(rest):
                break
            arg, quote, escape = "", "", False
            while i < len(rest) and (quote or not rest[i].isspace()):
                ch = rest[i]
                i += 1
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                    continue
                elif quote:
                    if ch == quote:
                        quote = ""
                        continue
                elif ch in "\"'":
                    quote = ch
                    continue
                elif ch == "#":
                    i = len(rest)
                    break
                arg += ch
            assert not quote, f"sbatch: unmatched quote in {line!r}"
            if arg:
                options.append(arg)
    return options


# -- the cases ------------------------------------------------------------------------------------------------
def test_an_image_path_with_command_substitution_stays_one_word():
    path = "/shared/$(touch /tmp/pwned)/pt.sqsh"
    lines = make_slurm(SlurmRequest(image=path, workspace="/home/u/p"), topo_of("h100-2s8g"), Fabric())
    argv = _bash_argv(lines.srun_text())
    assert f"--container-image={path}" in argv
    assert argv == lines.srun_argv()


def test_a_workspace_with_a_space_is_one_mount_argument():
    lines = make_slurm(SlurmRequest(image="/s/pt.sqsh", workspace="/home/u/My Project"), topo_of("h100-2s8g"),
                       Fabric())
    argv = _bash_argv(lines.srun_text())
    assert "--container-mounts=/home/u/My Project:/workspace" in argv
    assert argv[-3:-1] == ["bash", "-c"]  # the command is still `bash -c …`, not `Project:/workspace`


@pytest.mark.parametrize("option", ["--job-name", "--partition", "--time"])
def test_a_newline_in_an_sbatch_header_value_is_refused(option, tmp_path):
    res = _cli("--host-root", str(HOSTS / "h100-2s8g"), "--no-workspace", option, "x\n#SBATCH --wrap=evil",
               "/s/pt.sqsh")
    assert res.returncode == 2, res.stdout
    assert res.stdout == ""
    assert res.stderr.count("error:") == 1 and option in res.stderr and "Traceback" not in res.stderr


def test_header_values_with_spaces_quotes_and_hashes_read_back_whole():
    req = SlurmRequest(image="/s/pt.sqsh", job_name='my "big" run #1', partition="gpu 'a'", time="1-00:00:00")
    script = make_slurm(req, topo_of("h100-2s8g"), Fabric()).sbatch_text()
    header = _sbatch_header(script)
    assert '--job-name=my "big" run #1' in header and "--partition=gpu 'a'" in header
    assert "--time=1-00:00:00" in header and "--exclusive" in header  # every line after them still read


def test_a_relative_sqsh_is_printed_as_a_file(tmp_path):
    res = _cli("--host-root", str(HOSTS / "h100-2s8g"), "--no-workspace", "images/pytorch.sqsh", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"--container-image={tmp_path}/images/pytorch.sqsh" in res.stdout
    assert "--container-image=images/" not in res.stdout


def test_a_nonexistent_host_root_is_an_error_not_a_cpu_job(tmp_path):
    res = _cli("--host-root", str(tmp_path / "nope"), "--no-workspace", "/s/pt.sqsh")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: --host-root") and "no such folder" in res.stderr
    (tmp_path / "empty").mkdir()
    res = _cli("--host-root", str(tmp_path / "empty"), "--no-workspace", "/s/pt.sqsh")
    assert res.returncode == 2 and "not a host tree" in res.stderr
    res = _cli("--no-workspace", "/s/pt.sqsh", env={"IMAGEBUILD_HOST_ROOT": str(tmp_path / "nope")})
    assert res.returncode == 2 and "$IMAGEBUILD_HOST_ROOT" in res.stderr


def _odd_host(root: Path) -> Path:
    """A host tree with names and contents a careless recording or a hostile one can hold."""
    ib = root / "sys" / "class" / "infiniband"
    good = ib / "mlx5_0" / "ports" / "1"
    good.mkdir(parents=True)
    (good / "state").write_text("4: ACTIVE\n")
    (good / "rate").write_bytes(b"400 Gb/sec \xff\xfe\n")
    (ib / "mlx5_0" / "ports" / "1x").mkdir()
    (ib / "mlx5_0" / "device").mkdir()
    (ib / "mlx5_0" / "device" / "uevent").write_text("PCI_SLOT_NAME=../../../../etc\n")
    os.mkdir(os.fsencode(ib) + b"/mlx5_\xff")
    (ib / "mlx5_1\n$(id)").mkdir()
    node = root / "sys" / "devices" / "system" / "node"
    (node / "node0").mkdir(parents=True)
    (node / "node0" / "cpulist").write_bytes(b"0-\xff\n")
    (node / "node1").mkdir()
    (node / "node1" / "cpulist").write_text("0-99999999999\n")
    gpu = root / "proc" / "driver" / "nvidia" / "gpus" / "0000:18:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_bytes(b"Model: \xffH100\nBus Location: ../../../x\nGPU UUID: GPU-1\n")
    return root


def test_a_host_tree_with_odd_names_gives_no_traceback(tmp_path):
    res = _cli("--host-root", str(_odd_host(tmp_path / "host")), "--no-workspace", "/s/pt.sqsh")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "NCCL_IB_HCA==mlx5_0:1" in res.stdout  # the one well-named HCA, and nothing of the others
    assert "skipped sys/class/infiniband entries" in res.stderr and "\\n$(id)" in res.stderr


def test_mount_paths_pyxis_cannot_split_are_refused():
    topo = topo_of("h100-2s8g")
    for req, option in ((SlurmRequest(image="/s/p.sqsh", workspace="/home/u/a,b"), "--workspace"),
                        (SlurmRequest(image="/s/p.sqsh", workspace="/home/u/a:b"), "--workspace"),
                        (SlurmRequest(image="/s/p.sqsh", mounts=("/a,/b:/c",)), "--mount"),
                        (SlurmRequest(image="/s/p.sqsh", mounts=("/a:",)), "--mount")):
        with pytest.raises(UsageError, match=option):
            make_slurm(req, topo, Fabric())


def test_a_value_that_is_not_text_is_refused():
    bad = os.fsdecode(b"/s/\xff.sqsh")
    with pytest.raises(UsageError, match="IMAGE.*not UTF-8"):
        make_slurm(SlurmRequest(image=bad), topo_of("h100-2s8g"), Fabric())


# -- properties -------------------------------------------------------------------------------------------------------
# hostile text: shell metacharacters, quotes, whitespace, newlines, non-ASCII
_HOSTILE = st.text(alphabet=st.sampled_from(list("aZ09/._-~ \t\n'\"$`\\;&|<>(){}[]*?!#=%^+@é中")), min_size=1,
                   max_size=24)
_PATH = _HOSTILE.filter(lambda s: "," not in s and ":" not in s).map(lambda s: "/" + s)
_HEADER = st.text(alphabet=st.sampled_from(list("aZ09._- '\"\\#$`;:@é")), min_size=1, max_size=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(image=_PATH.map(lambda s: s + ".sqsh"), workspace=_PATH, workdir=_PATH, extra=_PATH,
       command=st.lists(_HOSTILE, min_size=1, max_size=4))
def test_srun_line_gives_back_exactly_the_intended_argv(image, workspace, workdir, extra, command):
    lines = make_slurm(SlurmRequest(image=image, workspace=workspace, workdir=workdir, mounts=(f"{extra}:/data:ro",),
                                    command=tuple(command)),
                       topo_of("h100-2s8g"), read_fabric(HOSTS / "h100-2s8g"))
    argv = lines.srun_argv()
    assert f"--container-image={os.path.abspath(image)}" in argv
    assert f"--container-mounts={workspace}:{workdir},{extra}:/data:ro" in argv
    assert f"--container-workdir={workdir}" in argv
    assert _shell_words(lines.srun_text()) == argv
    assert shlex.split(argv[-1])[-len(command):] == command  # bash -c's script runs exactly the command
    standalone = _shell_words(lines.srun_text(standalone=True))
    assert standalone[standalone.index("srun"):] == argv


@settings(max_examples=40, deadline=None)
@given(image=_PATH.map(lambda s: s + ".sqsh"), workspace=_PATH)
def test_bash_itself_reads_the_srun_line_back(image, workspace):
    lines = make_slurm(SlurmRequest(image=image, workspace=workspace), topo_of("h100-2s8g"), Fabric())
    assert _bash_argv(lines.srun_text()) == lines.srun_argv()


@settings(max_examples=150, deadline=None)
@given(job=_HEADER, partition=_HEADER, time=_HEADER)
def test_sbatch_header_gives_back_exactly_the_options(job, partition, time):
    lines = make_slurm(SlurmRequest(image="/s/p.sqsh", job_name=job, partition=partition, time=time),
                       topo_of("h100-2s8g"), Fabric())
    header = _sbatch_header(lines.sbatch_text())
    assert header[0] == f"--job-name={job}"
    assert header[-2:] == [f"--partition={partition}", f"--time={time}"]
    assert "--exclusive" in header


@settings(max_examples=60, deadline=None)
@given(value=st.text(min_size=1, max_size=10).map(lambda s: s + "\n" + s), option=st.sampled_from(
    ["job_name", "partition", "time"]))
def test_sbatch_header_values_with_a_newline_are_refused(value, option):
    with pytest.raises(UsageError, match="an #SBATCH line cannot hold it"):
        make_slurm(SlurmRequest(image="/s/p.sqsh", **{option: value}), topo_of("h100-2s8g"), Fabric())
