"""`imagebuild render` writes one folder per image; `--check` catches drift; `--version`/`--help` work."""

from __future__ import annotations

import shutil
import subprocess
import sys

from click.testing import CliRunner

from imagebuild.cli import cli


def run(*args):
    return CliRunner().invoke(cli, list(args), standalone_mode=False, catch_exceptions=False)


def test_render_then_check(tmp_path):
    out = tmp_path / "r"
    assert run("render", "--matrix", "cpu.yaml", "--out", str(out)).return_value == 0
    dockerfiles = sorted(p.parent.name for p in out.rglob("Dockerfile"))
    assert dockerfiles == [f"2.13.0-cpu-py3.11-debian12-{f}" for f in ("base", "dev", "runtime")]
    assert run("render", "--matrix", "cpu.yaml", "--out", str(out), "--check").return_value == 0

    runtime = out / "2.13.0-cpu-py3.11-debian12-runtime" / "Dockerfile"
    runtime.write_text(runtime.read_text() + "RUN true\n")
    result = run("render", "--matrix", "cpu.yaml", "--out", str(out), "--check")
    assert result.return_value == 1
    assert "differs" in result.output

    run("render", "--matrix", "cpu.yaml", "--out", str(out))
    (out / "2.13.0-cpu-py3.11-debian12-base" / "leftover.txt").write_text("x")
    result = run("render", "--matrix", "cpu.yaml", "--out", str(out), "--check")
    assert result.return_value == 1 and "stale" in result.output


def test_render_is_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run("render", "--matrix", "h100.yaml", "--out", str(a))
    run("render", "--matrix", "h100.yaml", "--out", str(b))
    files_a = {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b): p.read_bytes() for p in b.rglob("*") if p.is_file()}
    assert files_a == files_b and len(files_a) > 9


def test_version_and_help():
    out = subprocess.run([sys.executable, "-m", "imagebuild", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "imagebuild" in out.stdout
    for command in ("validate", "plan", "render", "build", "test", "push", "bake"):
        res = subprocess.run([sys.executable, "-m", "imagebuild", command, "--help"], capture_output=True, text=True)
        assert res.returncode == 0, (command, res.stderr)
        assert "Example" in res.stdout, command


def test_bad_matrix_exits_2_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmatrix:\n  pytorh: ['2.9.1']\n  cuda: ['12.8']\n")
    res = subprocess.run([sys.executable, "-m", "imagebuild", "plan", "--matrix", str(bad)],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert f"{bad}:3:" in res.stderr and "torch" in res.stderr


def test_render_removes_only_what_it_wrote_before(tmp_path):
    """A folder that held another matrix's render used to fail `render --check` forever."""
    out = tmp_path / "r"
    assert run("render", "--matrix", "h100.yaml", "--out", str(out)).return_value == 0
    (out / "README.md").write_text("ours, not the tool's\n")
    (out / "notes").mkdir()
    (out / "notes" / "keep.txt").write_text("x")
    assert run("render", "--matrix", "cpu.yaml", "--out", str(out)).return_value == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "2.13.0-cpu-py3.11-debian12-base", "2.13.0-cpu-py3.11-debian12-dev", "2.13.0-cpu-py3.11-debian12-runtime",
        "notes"]
    assert (out / "README.md").is_file() and (out / "notes" / "keep.txt").is_file()
    check = run("render", "--matrix", "cpu.yaml", "--out", str(out), "--check")
    assert check.return_value == 1
    assert sorted(ln for ln in check.output.splitlines() if ln.startswith("drift:")) == [
        f"drift: {out / 'README.md'}: stale (not written by `imagebuild render` here (no manifest line): delete it "
        "by hand)",
        f"drift: {out / 'notes' / 'keep.txt'}: stale (not written by `imagebuild render` here (no manifest line): "
        "delete it by hand)"]
    (out / "README.md").unlink()
    shutil.rmtree(out / "notes")
    assert run("render", "--matrix", "cpu.yaml", "--out", str(out), "--check").return_value == 0


def test_render_out_that_cannot_be_a_folder_is_one_error(tmp_path):
    from imagebuild.files import FileProblem

    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = CliRunner().invoke(cli, ["render", "--matrix", "cpu.yaml", "--out", str(blocker / "r")], standalone_mode=False)
    assert isinstance(r.exception, FileProblem) and str(r.exception).startswith(f"--out {blocker / 'r'}: cannot write")
