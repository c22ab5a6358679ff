"""Issue 42 item 3: `build --test` fails on a violation of the matrix's `audit:` policy (exit 1), passes when an
allowance covers the finding, and has no gate without the key; the results are kept in the record under each built
image's ID. pipeline.flow.build_run end to end over the one fake engine (images whose dpkg databases are real
Packages stanzas, libssl3 at an old version where stale) and the REAL bookworm-security index
(tests/unit/_security_index.py); the smoke runner answers a pass (its own tests are elsewhere)."""

from __future__ import annotations

import pytest
from _fake_engine import FakeEngine
from _security_index import OLD_SSL, debian12_fs, real_indexes
from _support import variant

from imagebuild.inputs import BuildInputs
from imagebuild.plan.assemble import plan_from_variants
from imagebuild.record import load_record
from imagebuild.smoke import runner

PASS = {"passed": 1, "failed": 0, "skipped": 0, "seconds": 1.0,
        "checks": [{"name": "system.ca_bundle", "status": "passed", "reason": "", "figures": {}}]}


def _plan(inputs: BuildInputs | None = None):
    """One CPU variant, rendered for real (base, runtime, dev)."""
    return plan_from_variants([variant("2.13.0-cpu-py3.11-debian12")], inputs or BuildInputs(), matrix_file="cpu.yaml")


@pytest.fixture(scope="module")
def index():
    return real_indexes()


def _build(index, tmp_path, monkeypatch, audit: str, stale: bool):
    """images/cpu.yaml's one variant built and tested (`build --test`) with `audit` as the matrix's audit key."""
    import imagebuild.engine
    from imagebuild.pipeline import flow
    from imagebuild.pipeline.settings import BuildSettings, RunOptions, Step, TestSettings

    indexes, real = index
    tmp_path.mkdir(parents=True, exist_ok=True)
    matrix = tmp_path / "cpu.yaml"
    matrix.write_text(f"{audit}\n" if audit else "x: 1\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda path, inputs, registry: _plan(inputs))
    monkeypatch.setattr("imagebuild.pipeline.auditing.SecurityIndexes", lambda tables: indexes)
    monkeypatch.setattr("imagebuild.pipeline.building.unreachable", lambda *a, **k: {})
    engine = FakeEngine()
    engine.add_image("example/os:1@sha256:" + "0" * 64, {})
    monkeypatch.setattr(imagebuild.engine, "connect", lambda *a, **k: engine)
    monkeypatch.setattr(runner, "docker_client", lambda: engine)
    monkeypatch.setattr(runner, "host_where", lambda client: "cpu")
    monkeypatch.setattr(runner, "run_smoke", lambda ref, flavor, exp, **kw: dict(PASS))

    class Filesystems(dict):
        def __missing__(self, image_id: str) -> bytes:
            self[image_id] = debian12_fs(indexes, real, stale=stale)
            return self[image_id]

    engine.filesystems = Filesystems()
    said: list[str] = []
    options = RunOptions(Step.BUILD, str(matrix), inputs=BuildInputs(backend="classic"),
                         state_dir=str(tmp_path / "state"), report_dir=tmp_path / "report",
                         build=BuildSettings(plain=True, sbom=False), test=TestSettings())
    result = flow.build_run(options, said.append, said.append)
    return result, said, matrix, real


def test_a_violation_fails_the_build_naming_the_package_and_the_policy(index, tmp_path, monkeypatch):
    result, said, matrix, real = _build(index, tmp_path, monkeypatch, "audit: {fail_on: security-fix}", stale=True)
    fixed = real.binaries["libssl3"].version
    assert not result.ok and all(r.status == "built" for r in result.results)
    assert any(line.startswith(f"audit:     libssl3 {OLD_SSL} -> {fixed} ") and "VIOLATION" in line
               for line in said), said
    assert any("violate the audit policy of" in line and "the build fails (exit 1)" in line for line in said), said
    rec = load_record(matrix, str(tmp_path / "state"))
    built = {r.image_id for r in result.results}
    assert set(rec.audits) == built  # kept under exactly the image IDs the build made


def test_an_allowance_lets_the_build_pass_and_says_why(index, tmp_path, monkeypatch):
    audit = ('audit: {fail_on: security-fix, allow: [{package: libssl3, reason: "rebuilt weekly", '
             'expires: 2099-12-31}]}')
    result, said, _, _ = _build(index, tmp_path, monkeypatch, audit, stale=True)
    assert result.ok
    assert any("libssl3" in line and "allowed (rebuilt weekly, until 2099-12-31)" in line for line in said), said
    # no OSV database on a build: the Python half is not checked, and the build says so instead of calling it clean
    assert "audit: no finding violates the matrix's audit policy; some sources were NOT CHECKED (above): not a " \
           "clean bill" in said


def test_a_current_image_passes_and_fail_on_none_never_fails(index, tmp_path, monkeypatch):
    result, said, _, _ = _build(index, tmp_path / "a", monkeypatch, "audit: {fail_on: security-fix}", stale=False)
    assert result.ok and not any("VIOLATION" in line for line in said)
    result, said, _, _ = _build(index, tmp_path / "b", monkeypatch, "audit: {fail_on: none}", stale=True)
    assert result.ok and any("below the policy" in line for line in said)


def test_no_audit_key_no_gate(index, tmp_path, monkeypatch):
    result, said, matrix, _ = _build(index, tmp_path, monkeypatch, "", stale=True)
    assert result.ok and not any(line.startswith("audit:") for line in said)
    assert not load_record(matrix, str(tmp_path / "state")).audits
