"""No command deletes or overwrites anything it did not write, and no write follows a symbolic link out of its output
folder (issue 25): render --out and its manifest, bake's contexts, wheelhouse and bake file, sbom -o, catalog -o,
the report's and the record's lock files and history; plus the record's `exports` of the wrong type and bake's
--os-image typo. Each case plants a link or an overlapping input the way a careless or hostile user would and checks
the file outside is untouched and the command says one line."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.errors import UsageError
from imagebuild.files import FileProblem
from imagebuild.models import Plan
from imagebuild.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
REG = "reg.test:5000/ml"


@pytest.fixture(scope="module")
def plan() -> Plan:
    return make_plan(ROOT / "images" / "cpu.yaml", None, REG)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside every output folder: no test may change it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("precious\n")
    return outside / "victim"


# -- files.py: the one home --------------------------------------------------------------------------------------

def test_atomic_write_replaces_a_link_and_a_hard_link_never_writes_through(tmp_path, victim):
    from imagebuild.files import write_bytes_atomic

    out = tmp_path / "out"
    out.mkdir()
    (out / "f").symlink_to(victim)
    write_bytes_atomic(out / "f", b"new\n")
    os.link(victim, out / "g")
    write_bytes_atomic(out / "g", b"new\n")
    assert victim.read_text() == "precious\n" and os.lstat(victim).st_nlink == 1
    assert (out / "f").read_bytes() == (out / "g").read_bytes() == b"new\n" and not (out / "f").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == ["f", "g"]  # no temporary file left


def test_write_inside_refuses_a_linked_folder_and_regular_file_inside_says_what_may_go(tmp_path, victim):
    from imagebuild.files import regular_file_inside, write_inside

    out = tmp_path / "out"
    out.mkdir()
    (out / "d").symlink_to(victim.parent)
    with pytest.raises(FileProblem, match="symbolic link"):
        write_inside(out, "d/victim", b"x", "test")
    with pytest.raises(FileProblem, match="not a plain path"):
        write_inside(out, "../outside/victim", b"x", "test")
    assert victim.read_text() == "precious\n"
    (out / "real").write_text("mine")
    (out / "link").symlink_to(victim)
    assert regular_file_inside(out, "real")
    assert not regular_file_inside(out, "link") and not regular_file_inside(out, "d/victim")
    assert not regular_file_inside(out, "../outside/victim") and not regular_file_inside(out, "missing")


# -- render --out ----------------------------------------------------------------------------------------------

def test_render_manifest_deletes_nothing_through_a_link(tmp_path, plan, victim):
    """Failed before: the manifest's `d/victim` (d a link to the outside folder) and `v` (a link to the victim)
    were unlinked, deleting the file outside OUT."""
    from imagebuild.plan.write import MANIFEST, write_rendered

    out = tmp_path / "out"
    out.mkdir()
    (out / "d").symlink_to(victim.parent)
    (out / MANIFEST).write_text("# files\nd/victim\nv\n../outside/victim\n")
    write_rendered(plan, out)
    assert victim.read_text() == "precious\n"
    assert (out / "d").is_symlink()  # not ours: left alone


def test_render_writes_no_file_through_a_planted_link(tmp_path, plan, victim):
    """Failed before: OUT/<id>/Dockerfile as a link to the victim was written through."""
    from imagebuild.plan.write import write_rendered

    out = tmp_path / "out"
    first = plan.images[0].id
    (out / first).mkdir(parents=True)
    (out / first / "Dockerfile").symlink_to(victim)
    write_rendered(plan, out)
    assert victim.read_text() == "precious\n"
    assert not (out / first / "Dockerfile").is_symlink()
    assert (out / first / "Dockerfile").read_text() == plan.images[0].dockerfile


def test_render_into_a_linked_image_folder_is_one_error(tmp_path, plan, victim):
    """Failed before: OUT/<id> as a link to a folder outside got the Dockerfile written there."""
    from imagebuild.plan.write import write_rendered

    out = tmp_path / "out"
    out.mkdir()
    (out / plan.images[0].id).symlink_to(victim.parent)
    with pytest.raises(FileProblem, match="is a symbolic link"):
        write_rendered(plan, out)
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim"]


# -- bake ------------------------------------------------------------------------------------------------------

def test_bake_refuses_a_wheelhouse_inside_its_own_context(tmp_path, plan):
    """Failed before: the context refresh deleted the wheelhouse (rmtree), then copytree raised a traceback."""
    from imagebuild.builder.bake import write_bake

    first = plan.images[0]
    wheelhouse = tmp_path / "bake-context" / first.id / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    (wheelhouse / "torch.whl").write_bytes(b"wheel")
    with_wh = Plan(plan.matrix_file, [replace(img, context_dirs={"wheelhouse": wheelhouse}) for img in plan.images])
    with pytest.raises(FileProblem, match="overlap"):
        write_bake(with_wh, tmp_path / "docker-bake.json")
    assert (wheelhouse / "torch.whl").read_bytes() == b"wheel"


def test_bake_never_writes_through_a_linked_context_or_bake_file(tmp_path, plan, victim):
    """Failed before: a bake-context/<id> link got the Dockerfile written outside; -o as a link to the victim was
    written through."""
    from imagebuild.builder.bake import write_bake

    out = tmp_path / "b"
    (out / "bake-context").mkdir(parents=True)
    (out / "bake-context" / plan.images[0].id).symlink_to(victim.parent)
    with pytest.raises(FileProblem, match="is a symbolic link"):
        write_bake(plan, out / "docker-bake.json")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim"]
    (out / "bake-context" / plan.images[0].id).unlink()
    (out / "docker-bake.json").symlink_to(victim)
    write_bake(plan, out / "docker-bake.json")
    assert victim.read_text() == "precious\n"
    assert json.loads((out / "docker-bake.json").read_text())["target"]


def test_bake_context_files_replace_hard_links_into_the_wheelhouse(tmp_path, plan):
    """The wheelhouse is hard-linked into each context; a context file written over such a link (same name) must
    replace the link, never change the wheelhouse's file (a write in place would)."""
    from imagebuild.builder.bake import write_bake

    first = plan.images[0]
    folder = tmp_path / "bake-context" / first.id
    folder.mkdir(parents=True)
    shared = tmp_path / "shared"
    shared.write_text("someone else's\n")
    os.link(shared, folder / "Dockerfile")
    write_bake(Plan(plan.matrix_file, [first]), tmp_path / "docker-bake.json")
    assert shared.read_text() == "someone else's\n" and (folder / "Dockerfile").read_text() == first.dockerfile


def test_bake_os_image_typo_says_the_choices(tmp_path):
    """Failed before: `--os-image debain12=...` was ignored and the bake file got the default base, exit 0."""
    from imagebuild.commands.bake import command

    res = CliRunner().invoke(command, ["--matrix", str(ROOT / "images" / "cpu.yaml"), "--state-dir",
                                       str(tmp_path / "state"), "-o", str(tmp_path / "b.json"),
                                       "--os-image", "debain12=reg/os/debian:12"])
    assert isinstance(res.exception, UsageError) and "did you mean 'debian12'" in str(res.exception)
    assert not (tmp_path / "b.json").exists()


# -- sbom -o, catalog -o -----------------------------------------------------------------------------------------

def test_sbom_never_writes_through_a_planted_tmp_link(tmp_path, monkeypatch, victim):
    """Failed before: `sbom -o X` wrote X.tmp, a link to the victim, so the SBOM replaced the victim's content."""
    from _inventory_cases import fixture_inventory

    from imagebuild.commands.sbom import command

    class Opener:
        def __init__(self, *a, **k):
            pass

        def open(self, text):
            return fixture_inventory()

    monkeypatch.setattr("imagebuild.inventory.open.Opener", Opener)
    out = tmp_path / "img.cdx.json"
    (tmp_path / "img.cdx.json.tmp").symlink_to(victim)
    res = CliRunner().invoke(command, ["some:image", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "precious\n" and json.loads(out.read_text())["bomFormat"] == "CycloneDX"
    res = CliRunner().invoke(command, [""])
    assert isinstance(res.exception, UsageError) and "REF is empty" in str(res.exception)


def test_catalog_output_link_is_replaced_not_written_through(tmp_path, monkeypatch, victim):
    """Failed before: -o was resolved, so a link at that name had the catalog written into the file it names."""
    from _fake_registry import FakeRegistry

    from imagebuild.commands.catalog import command
    from imagebuild.oci import RegistryAuth

    monkeypatch.setattr("imagebuild.commands.catalog.resolve_auth", lambda host, **k: RegistryAuth(host))
    monkeypatch.setattr("imagebuild.commands.catalog.RegistryClient", lambda auth, **k: FakeRegistry(auth.registry))
    out = tmp_path / "CATALOG.md"
    out.symlink_to(victim)
    res = CliRunner().invoke(command, ["--matrix", str(ROOT / "images" / "cpu.yaml"), "--registry", REG,
                                       "--state-dir", str(tmp_path / "state"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and "**not pushed**" in out.read_text()


# -- report and record -------------------------------------------------------------------------------------------

def test_report_lock_and_history_links_are_not_followed(tmp_path, victim):
    """Failed before: the lock file was opened with "w" (truncating the victim) and history.jsonl appended to it."""
    from imagebuild.report.stored import ReportError
    from imagebuild.report.writer import write_reports

    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / ".build-report.lock").symlink_to(victim)
    with pytest.raises(FileProblem, match="symbolic link"):
        write_reports([], reports)
    assert victim.read_text() == "precious\n"
    (reports / ".build-report.lock").unlink()
    (reports / "history.jsonl").symlink_to(victim)
    with pytest.raises(ReportError, match="symbolic link"):
        write_reports([], reports)
    assert victim.read_text() == "precious\n"


def test_record_lock_link_is_not_followed(tmp_path, victim):
    """Failed before: `updating` opened the planted `.cpu.state.json.lock` link with "w", truncating the victim."""
    from imagebuild.record import updating
    from imagebuild.record.store import record_path

    matrix = ROOT / "images" / "cpu.yaml"
    path = record_path(matrix, tmp_path / "state")
    path.parent.mkdir(parents=True)
    (path.parent / f".{path.name}.lock").symlink_to(victim)
    with pytest.raises(FileProblem, match="symbolic link"), updating(matrix, directory=tmp_path / "state"):
        pass
    assert victim.read_text() == "precious\n" and not path.exists()


@pytest.mark.parametrize("exports", ["a string", {"squashfs": "a string"}, {"squashfs": {"path": 7}}])
def test_record_exports_of_the_wrong_type_are_a_record_problem(tmp_path, exports):
    """Failed before: shape_problem let them through and `slurm --matrix` / `export --matrix` raised a traceback
    (AttributeError on str.get)."""
    from imagebuild.record.store import SCHEMA, load_record, record_path

    matrix = ROOT / "images" / "cpu.yaml"
    path = record_path(matrix, tmp_path)
    path.write_text(json.dumps({"schema": SCHEMA, "tool_version": "0", "matrix": str(matrix), "inputs": {},
                                "images": {"x": {"id": "x", "flavor": "base", "inputs_hash": "h",
                                                 "exports": exports}}}))
    rec = load_record(matrix, tmp_path)
    assert rec is not None and rec.problem is not None and "exports" in rec.problem and rec.images == {}


def test_an_unwritable_output_is_refused_before_the_image_or_registry_is_read(tmp_path, monkeypatch):
    """Failed before: `sbom -o` read the whole image (a registry download) and only then failed to write; `catalog -o`
    asked the registry first. /proc takes no new file even for root, so this holds whoever runs the tests."""
    from imagebuild.commands.catalog import command as catalog
    from imagebuild.commands.sbom import command as sbom

    asked: list[str] = []

    class Opener:
        def __init__(self, *a, **k):
            pass

        def open(self, text):
            asked.append(text)
            raise AssertionError("the image was read before the output was checked")

    monkeypatch.setattr("imagebuild.inventory.open.Opener", Opener)
    monkeypatch.setattr("imagebuild.commands.catalog.RegistryClient", lambda *a, **k: asked.append("registry"))
    for command, args in ((sbom, ["some:image", "-o", "/proc/sbom.json"]), (sbom, ["some:image", "-o", str(tmp_path)]),
                          (catalog, ["--matrix", str(ROOT / "images" / "cpu.yaml"), "--registry", REG,
                                     "--state-dir", str(tmp_path / "state"), "-o", "/proc/CATALOG.md"])):
        res = CliRunner().invoke(command, args)
        assert isinstance(res.exception, FileProblem), res.output
        assert "cannot write in /proc" in str(res.exception) or "is a folder" in str(res.exception)
    assert asked == []


def test_a_build_log_never_truncates_a_linked_file(tmp_path, victim):
    """Failed before: open(path, "w") followed a link planted at reports/logs/<id>.log and truncated the victim."""
    from imagebuild.builder.logs import open_log

    logs = tmp_path / "reports" / "logs"
    logs.mkdir(parents=True)
    (logs / "img.log").symlink_to(victim)
    with open_log(logs / "img.log") as log:
        log.write("step 1\n")
    assert victim.read_text() == "precious\n"
    assert not (logs / "img.log").is_symlink() and (logs / "img.log").read_text() == "step 1\n"


def test_render_check_reads_no_link_and_opens_no_fifo(tmp_path, plan, victim):
    """Failed before: `render --check` read a Dockerfile link's target as the rendered file and blocked forever on a
    FIFO at a rendered name (render --check runs in lint)."""
    import signal

    from imagebuild.plan.write import diff_rendered, write_rendered

    out = tmp_path / "out"
    out.mkdir()
    write_rendered(plan, out)
    first, second = plan.images[0], plan.images[1]
    victim.write_text(first.dockerfile)  # the link's target holds exactly what the render would write
    (out / first.id / "Dockerfile").unlink()
    (out / first.id / "Dockerfile").symlink_to(victim)
    (out / second.id / "Dockerfile").unlink()
    os.mkfifo(out / second.id / "Dockerfile")
    old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("render --check blocked")))
    signal.alarm(20)
    try:
        problems = diff_rendered(plan, out)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert [p.split(": ", 1)[0] for p in problems] == [str(out / first.id / "Dockerfile"),
                                                       str(out / second.id / "Dockerfile")]
    assert all("not a regular file" in p for p in problems)
