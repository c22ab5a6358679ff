"""Python packages against advisories (issue 42, items 2 and 6): the OSV fixture (tests/fixtures/osv/, real schema)
read as a folder and zipped, OSV's range evaluation at its boundaries, "not checked" without a source, damaged
databases named and never read as clean, PyPI's advisories only for the newest release (fetch injected: no network)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.audit import osv as osv_mod
from imagebuild.audit.cvss import cvss3_score
from imagebuild.audit.python import (
    ENV_OSV,
    OsvSource,
    PyPIAdvisories,
    PyPINotFound,
    PythonAudit,
    audit_python,
    open_osv,
    urllib_fetch,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "osv"
DOCS = sorted(FIXTURE.glob("*.json"))


def _zip(folder: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for doc in sorted(folder.glob("*.json")):
            z.write(doc, doc.name)
    return target


@pytest.fixture(params=["folder", "zip", "export-folder"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> OsvSource:
    if request.param == "folder":
        path = FIXTURE
    elif request.param == "zip":
        path = _zip(FIXTURE, tmp_path / "all.zip")
    else:  # a mirror of OSV's bucket: <dir>/PyPI/all.zip
        _zip(FIXTURE, tmp_path / "mirror" / "PyPI" / "all.zip")
        path = tmp_path / "mirror"
    src = open_osv(path, environ={})
    assert src.status.state == "checked", src.status
    assert src.db is not None and src.db.kind == ("folder" if request.param == "folder" else "zip")
    return src


def _one(src: OsvSource, name: str, version: str) -> PythonAudit:
    return audit_python([(name, version)], src)


def _ids(result: PythonAudit) -> dict[str, tuple[str, ...]]:
    return {f.id: f.fixed for f in result.findings}


# ---- the fixture is the real schema ---------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.stem)
def test_fixture_documents_have_the_schema_required_fields(doc: Path) -> None:
    data = json.loads(doc.read_text(encoding="utf-8"))
    assert data["id"] == doc.stem and isinstance(data["modified"], str) and data["modified"].endswith("Z")
    assert isinstance(data.get("schema_version", ""), str)
    for key in ("aliases", "related"):
        assert all(isinstance(a, str) for a in data.get(key, []))
    assert isinstance(data.get("withdrawn", ""), str)
    for aff in data["affected"]:
        assert isinstance(aff["package"]["ecosystem"], str) and isinstance(aff["package"]["name"], str)
        assert "ranges" in aff or "versions" in aff
        for rng in aff.get("ranges", []):
            assert rng["type"] in ("ECOSYSTEM", "SEMVER", "GIT")
            assert rng["type"] != "GIT" or rng["repo"].startswith("https://")
            assert any("introduced" in e for e in rng["events"])
            for evt in rng["events"]:
                assert len(evt) == 1 and next(iter(evt)) in osv_mod.EVENT_KINDS
                assert isinstance(next(iter(evt.values())), str)
            kinds = {k for e in rng["events"] for k in e}
            assert not {"fixed", "last_affected"} <= kinds  # the schema allows one or the other
    for sev in data.get("severity", []):
        assert sev["type"] in ("CVSS_V2", "CVSS_V3", "CVSS_V4", "Ubuntu") and isinstance(sev["score"], str)


def test_fixture_database_counts(source: OsvSource) -> None:
    db = source.db
    assert db is not None
    assert db.documents == len(DOCS) and db.withdrawn == 1 and db.other_ecosystems == 1 and not db.damaged
    assert db.newest_modified == "2026-11-30T14:00:00Z"
    assert "urllib3" in db.by_package and "osv-fixture-example" in db.by_package
    assert "TEST-2026-0002" not in {a.id for a in db.advisories("urllib3")}  # withdrawn
    assert "TEST-2026-0003" not in {a.id for a in db.advisories("urllib3")}  # npm


# ---- findings and boundaries ----------------------------------------------------------------------------------


def test_affected_urllib3_reported_with_fixed_versions_aliases_severity(source: OsvSource) -> None:
    result = _one(source, "urllib3", "1.26.4")
    assert result.checked
    by_id = {f.id: f for f in result.findings}
    assert set(by_id) == {"PYSEC-2021-108", "PYSEC-2023-212"}  # the GHSA entry is merged into its PYSEC alias
    old = by_id["PYSEC-2021-108"]
    assert old.fixed == ("1.26.5",) and old.cves == ("CVE-2021-33503",) and old.installed == "1.26.4"
    assert old.severity == "unknown" and old.modified == "2021-07-02T18:56:20.858344Z" and old.sources == ("osv",)
    new = by_id["PYSEC-2023-212"]
    assert new.fixed == ("1.26.18",) and "GHSA-g4mx-q9vg-27p4" in new.aliases and new.cves == ("CVE-2023-45803",)
    assert new.severity == "medium"  # CVSS 4.2 and GHSA's MODERATE agree
    assert "2 known vulnerabilities in 1 of 1 packages looked up, against osv (OSV " in result.summary()


@pytest.mark.parametrize(("version", "expected"), [
    ("1.26.5", {"PYSEC-2023-212": ("1.26.18",)}),  # fixed is exclusive
    ("1.26.17", {"PYSEC-2023-212": ("1.26.18",)}),
    ("1.26.18", {}),
    ("2.0.0", {"PYSEC-2023-212": ("2.0.7",)}),  # introduced is inclusive; events given out of order
    ("2.0.6", {"PYSEC-2023-212": ("2.0.7",)}),
    ("2.0.7", {}),
    ("2.2.3", {}),  # the withdrawn TEST-2026-0002 and the npm TEST-2026-0003 would name it
    ("1.26.5+local.1", {"PYSEC-2023-212": ("1.26.18",)}),
])
def test_urllib3_boundaries(source: OsvSource, version: str, expected: dict[str, tuple[str, ...]]) -> None:
    result = _one(source, "urllib3", version)
    assert _ids(result) == expected and not result.not_looked_up


@pytest.mark.parametrize(("name", "version", "affected"), [
    ("osv-fixture-example", "0.9", False),
    ("osv-fixture-example", "1.0", True),
    ("Osv_Fixture.Example", "1.4.2", True),  # last_affected is inclusive; PEP 503 names
    ("OSV.fixture_EXAMPLE", "1.4.2.post1", False),
    ("osv-fixture-example", "1.4.3", False),
])
def test_last_affected(source: OsvSource, name: str, version: str, affected: bool) -> None:
    result = _one(source, name, version)
    assert bool(result.findings) is affected
    if affected:
        (f,) = result.findings
        assert (f.id, f.fixed, f.last_affected, f.severity, f.package) == (
            "TEST-2026-0001", (), "1.4.2", "critical", name)
        assert f.cves == ("CVE-2026-99901",)


@pytest.mark.parametrize(("version", "affected"), [("2.9", True), ("3.0", False), ("3.1", False)])
def test_limit(source: OsvSource, version: str, affected: bool) -> None:
    result = _one(source, "osv-fixture-limited", version)
    assert [f.severity for f in result.findings] == (["critical"] if affected else [])


@pytest.mark.parametrize(("version", "affected"), [
    ("1.19.0", True), ("1.19.0rc1", True), ("1.19", True), ("1.18.3", False), ("1.19.1", False)])
def test_explicit_versions_list(source: OsvSource, version: str, affected: bool) -> None:
    result = _one(source, "numpy", version)
    assert _ids(result) == ({"PYSEC-2021-856": ()} if affected else {})


def test_setuptools(source: OsvSource) -> None:
    assert _ids(_one(source, "setuptools", "65.5.0")) == {"PYSEC-2022-43012": ("65.5.1",)}
    assert _ids(_one(source, "setuptools", "65.5.1")) == {}


def test_unparsable_installed_version_is_listed_never_unaffected(source: OsvSource) -> None:
    result = audit_python([("setuptools", "not a version!"), ("numpy", "1.19.1")], source)
    assert not result.findings
    assert result.unlooked == (("setuptools", "not a version!"),)
    (miss,) = result.not_looked_up
    assert miss.source == "osv" and "not a PEP 440 version" in miss.reason and "1 advisories" in miss.reason
    assert "1 of 2 could not be looked up: setuptools not a version!" in result.summary()


def test_unorderable_range_is_listed_never_unaffected(source: OsvSource) -> None:
    result = _one(source, "osv-fixture-unorderable", "1.0")
    assert not result.findings
    (miss,) = result.not_looked_up
    assert "TEST-2026-0005" in miss.reason and "2.0-final-build.7" in miss.reason
    assert result.unlooked == (("osv-fixture-unorderable", "1.0"),)


def test_same_distribution_twice_is_audited_once(source: OsvSource) -> None:
    result = audit_python([("urllib3", "1.26.4"), ("URLLib3", "1.26.4")], source)
    assert result.packages == 1 and len(result.findings) == 2


# ---- not checked ----------------------------------------------------------------------------------------------


def test_no_source_is_not_checked_never_zero() -> None:
    result = audit_python([("urllib3", "1.26.4"), ("weird", "x.y")], open_osv(None, environ={}))
    assert not result.checked and not result.findings
    text = result.summary()
    assert "not checked" in text and "--osv PATH" in text and ENV_OSV in text
    assert "0 " not in text and "vulnerabilit" not in text
    assert result.unlooked == (("weird", "x.y"),)
    bare = audit_python([("urllib3", "1.26.4")])
    assert not bare.checked and "not checked" in bare.summary() and not bare.unlooked


def test_environment_variable_names_the_database() -> None:
    src = open_osv(None, environ={ENV_OSV: str(FIXTURE)})
    assert src.status.state == "checked" and str(FIXTURE) in src.status.detail
    assert "newest modified 2026-11-30" in src.status.detail and src.status.date == "2026-11-30T14:00:00Z"


def test_missing_database_is_an_error_not_clean(tmp_path: Path) -> None:
    src = open_osv(tmp_path / "nope.zip", environ={})
    assert src.status.state == "error" and "nope.zip" in src.status.detail and "\n" not in src.status.detail
    result = audit_python([("urllib3", "1.26.4")], src)
    assert not result.checked and "not checked" in result.summary() and "no such OSV database" in result.summary()


# ---- damaged databases ----------------------------------------------------------------------------------------


def test_damaged_documents_in_a_folder_are_named(tmp_path: Path) -> None:
    shutil.copy(FIXTURE / "PYSEC-2021-108.json", tmp_path)
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "latin1.json").write_bytes(b'{"id": "\xe9"}')
    (tmp_path / "list.json").write_text("[]", encoding="utf-8")
    wrong = {"id": "PYSEC-9999-1", "modified": "2026-01-01T00:00:00Z",
             "affected": [{"package": {"ecosystem": "PyPI", "name": "urllib3"}, "ranges": "oops"}]}
    (tmp_path / "wrong-types.json").write_text(json.dumps(wrong), encoding="utf-8")
    (tmp_path / "no-id.json").write_text(json.dumps({"modified": "x", "affected": []}), encoding="utf-8")
    src = open_osv(tmp_path, environ={})
    assert src.status.state == "partial" and src.db is not None
    damaged = {d.name: d.why for d in src.status.damaged}
    assert set(damaged) == {"broken.json", "latin1.json", "list.json", "wrong-types.json", "no-id.json"}
    assert damaged["wrong-types.json"] == "not an OSV document: affected[0].ranges is str, not list"
    assert damaged["no-id.json"] == "not an OSV document: id is missing"
    assert "5 damaged entries" in src.status.detail
    result = audit_python([("urllib3", "1.26.4"), ("numpy", "1.26.0")], src)
    assert [f.id for f in result.findings] == ["PYSEC-2021-108"]
    assert result.unlooked == (("urllib3", "1.26.4"),)  # the damaged document names it
    assert "wrong-types.json" in result.not_looked_up[0].reason


def test_damaged_zips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _zip(FIXTURE, tmp_path / "good.zip")
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    assert open_osv(truncated, environ={}).status.state == "error"
    assert "not a readable OSV export zip" in open_osv(truncated, environ={}).status.detail
    text = tmp_path / "all.zip.txt"
    text.write_text("hello", encoding="utf-8")
    assert open_osv(text, environ={}).status.state == "error"
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    assert "no OSV JSON documents" in open_osv(empty, environ={}).status.detail

    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.write(FIXTURE / "PYSEC-2021-108.json", "PYSEC-2021-108.json")
        z.writestr("../../etc/evil.json", "{}")
        z.writestr("/abs.json", "{}")
        z.writestr("big.json", json.dumps({"id": "BIG-1", "modified": "x", "details": "a" * 5000}))
        z.writestr("notes.txt", "ignored")
    monkeypatch.setattr(osv_mod, "MAX_DOCUMENT", 4096)
    src = open_osv(evil, environ={})
    assert src.status.state == "partial"
    damaged = {d.name: d.why for d in src.status.damaged}
    assert set(damaged) == {"../../etc/evil.json", "/abs.json", "big.json"}
    assert damaged["big.json"].startswith("larger than 4096 bytes")
    assert "unsafe member name" in damaged["../../etc/evil.json"]
    assert src.db is not None and src.db.documents == 1

    # a member whose bytes are damaged (CRC) is named, the others read
    crc = tmp_path / "crc.zip"
    with zipfile.ZipFile(crc, "w", zipfile.ZIP_STORED) as z:
        z.write(FIXTURE / "PYSEC-2021-108.json", "PYSEC-2021-108.json")
        z.write(FIXTURE / "PYSEC-2022-43012.json", "PYSEC-2022-43012.json")
    data = bytearray(crc.read_bytes())
    at = data.index(b"65.5.1")
    data[at:at + 6] = b"99.9.9"
    crc.write_bytes(bytes(data))
    src = open_osv(crc, environ={})
    assert [d.name for d in src.status.damaged] == ["PYSEC-2022-43012.json"]
    assert "cannot be read from the zip" in src.status.damaged[0].why


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=600))
def test_any_bytes_are_an_error_or_damaged_never_a_traceback(tmp_path: Path, data: bytes) -> None:
    for name in ("x.zip", "x.json"):
        p = tmp_path / "any" / name
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
        src = open_osv(p if name.endswith(".zip") else p.parent, environ={})
        assert src.status.state in ("error", "partial", "checked")
        shutil.rmtree(p.parent)


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(
                        st.sampled_from(["id", "modified", "affected", "package", "ecosystem", "name", "ranges",
                                         "type", "events", "introduced", "fixed", "versions", "aliases",
                                         "withdrawn", "severity", "database_specific"]), c, max_size=4),
                    max_leaves=20))
def test_any_json_shape_is_read_or_named_damaged(doc: object) -> None:
    db = osv_mod.OsvDatabase(source="t", kind="folder")
    osv_mod._add_document(db, "t.json", json.dumps(doc).encode())
    assert db.documents + len(db.damaged) == 1


# ---- PyPI: the newest release only ----------------------------------------------------------------------------


def _pypi_answer(version: str, vulns: list[dict[str, object]]) -> bytes:
    return json.dumps({"info": {"name": "urllib3", "version": version}, "vulnerabilities": vulns}).encode()


def test_pypi_newest_release_vulnerabilities_apply_and_merge_with_osv(source: OsvSource) -> None:
    asked: list[str] = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        if url.endswith("/numpy/json"):
            raise PyPINotFound(url)
        return _pypi_answer("1.26.4", [
            {"id": "GHSA-g4mx-q9vg-27p4", "aliases": ["CVE-2023-45803"], "fixed_in": ["2.0.7", "1.26.18"],
             "summary": None, "withdrawn": None},
            {"id": "GHSA-v845-jxx5-vc9f", "aliases": ["CVE-2023-43804"], "fixed_in": ["1.26.17"],
             "summary": "Cookie HTTP header isn't stripped on cross-origin redirects", "withdrawn": None},
            {"id": "GHSA-0000-0000-0000", "aliases": [], "fixed_in": [], "withdrawn": "2024-01-01T00:00:00Z"}])

    pypi = PyPIAdvisories(fetch)
    result = audit_python([("urllib3", "1.26.4"), ("numpy", "1.19.1")], source, pypi)
    assert asked == ["https://pypi.org/pypi/numpy/json", "https://pypi.org/pypi/urllib3/json"]
    by_id = {f.id: f for f in result.findings}
    assert set(by_id) == {"PYSEC-2021-108", "PYSEC-2023-212", "GHSA-v845-jxx5-vc9f"}
    assert by_id["PYSEC-2023-212"].sources == ("osv", "pypi")
    assert by_id["PYSEC-2023-212"].fixed == ("1.26.18", "2.0.7")
    assert by_id["GHSA-v845-jxx5-vc9f"].sources == ("pypi",) and by_id["GHSA-v845-jxx5-vc9f"].fixed == ("1.26.17",)
    assert [s.source for s in result.sources] == ["osv", "pypi"] and result.sources[1].state == "checked"
    (miss,) = result.not_looked_up
    assert miss.package == "numpy" and miss.source == "pypi" and "not on https://pypi.org/pypi" in miss.reason
    assert result.unlooked == ()  # OSV looked numpy up


def test_pypi_older_release_is_not_checked_via_pypi() -> None:
    pypi = PyPIAdvisories(lambda url: _pypi_answer("2.2.3", [{"id": "GHSA-x", "aliases": [], "fixed_in": []}]))
    result = audit_python([("urllib3", "1.26.4")], None, pypi)
    assert result.checked and not result.findings
    (miss,) = result.not_looked_up
    assert miss.reason == "not checked via PyPI: installed 1.26.4 is not the newest release 2.2.3"
    assert result.unlooked == (("urllib3", "1.26.4"),)
    assert result.summary().startswith("Python packages: 0 known vulnerabilities in 0 of 0 packages looked up")
    assert "1 of 1 could not be looked up: urllib3 1.26.4" in result.summary()
    assert json.loads(json.dumps(result.as_dict()))["unlooked"] == [{"package": "urllib3", "version": "1.26.4"}]


def test_pypi_unreachable_is_asked_once_and_says_so() -> None:
    calls: list[str] = []

    def fetch(url: str) -> bytes:
        calls.append(url)
        raise OSError("Connection refused")

    pypi = PyPIAdvisories(fetch)
    result = audit_python([("a", "1"), ("b", "2"), ("c", "3")], None, pypi)
    assert len(calls) == 1 and not result.checked
    assert result.sources[1].state == "error" and "Connection refused" in result.sources[1].detail
    assert {m.package for m in result.not_looked_up if m.source == "pypi"} == {"a", "b", "c"}
    assert "not checked" in result.summary()


@pytest.mark.parametrize("body", [b"<html>", b"[]", json.dumps({"info": {}, "vulnerabilities": []}).encode(),
                                  json.dumps({"info": {"version": "1"}, "vulnerabilities": [7]}).encode()])
def test_pypi_odd_answers_are_listed(body: bytes) -> None:
    result = audit_python([("a", "1")], None, PyPIAdvisories(lambda url: body))
    assert not result.findings and result.unlooked == (("a", "1"),)


def test_cvss3_scores() -> None:
    assert cvss3_score("CVSS:3.1/AV:A/AC:H/PR:H/UI:N/S:U/C:H/I:N/A:N") == 4.2
    assert cvss3_score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H") == 9.8
    assert cvss3_score("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N") == 6.1
    assert cvss3_score("CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H") == 10.0
    assert cvss3_score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N") == 0.0
    assert cvss3_score("CVSS:4.0/AV:N/AC:L/AT:N/PR:H/UI:N/VC:L/VI:L/VA:N/SC:N/SI:N/SA:N") is None
    assert cvss3_score("CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H") is None
    assert cvss3_score("CVSS:3.1/AV:N") is None


def test_urllib_fetch_against_a_local_index() -> None:
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            status = {"/pypi/urllib3/json": 200, "/pypi/gone/json": 404}.get(self.path, 500)
            body = _pypi_answer("1.26.4", []) if status == 200 else b"no"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/pypi"
        fetch = urllib_fetch(timeout=5, environ={})
        assert json.loads(fetch(f"{index}/urllib3/json"))["info"]["version"] == "1.26.4"
        with pytest.raises(PyPINotFound):
            fetch(f"{index}/gone/json")
        with pytest.raises(OSError, match="HTTP 500"):
            fetch(f"{index}/broken/json")
        result = audit_python([("urllib3", "1.26.4"), ("gone", "1")], None, PyPIAdvisories(fetch, index=index))
        assert result.checked and result.unlooked == (("gone", "1"),)
    finally:
        server.shutdown()
        server.server_close()


def test_unparsable_version_named_in_a_versions_list_is_still_reported(tmp_path: Path) -> None:
    doc = {"id": "PYSEC-0000-TEST", "modified": "2026-01-01T00:00:00Z",
           "affected": [{"package": {"ecosystem": "PyPI", "name": "oddpkg"}, "versions": ["1.0-custom build"],
                         "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0"}]}]}]}
    (tmp_path / "PYSEC-0000-TEST.json").write_text(json.dumps(doc), encoding="utf-8")
    result = audit_python([("oddpkg", "1.0-custom build")], open_osv(tmp_path, environ={}))
    assert [f.id for f in result.findings] == ["PYSEC-0000-TEST"]
    assert result.unlooked == (("oddpkg", "1.0-custom build"),)  # the ranges could not be evaluated


def test_into_the_audit_model(source: OsvSource) -> None:
    from imagebuild.audit import model

    pypi = PyPIAdvisories(lambda url: _pypi_answer("1.26.4", [
        {"id": "GHSA-g4mx-q9vg-27p4", "aliases": ["CVE-2023-45803"], "fixed_in": ["2.0.7", "1.26.18"]}]))
    py = audit_python([("urllib3", "1.26.4"), ("osv-fixture-example", "1.2"), ("odd", "?")], source, pypi)
    result = py.into(model.AuditResult(image="img:1", image_id="sha256:" + "a" * 64))
    assert result.checked() and result.checked("python")
    assert {s.source for s in result.sources} == {"python osv", "python pypi"}
    assert all(s.state == model.CHECKED for s in result.sources)
    by_id = {f.ids[0]: f for f in result.findings}
    assert set(by_id) == {"PYSEC-2021-108", "PYSEC-2023-212", "TEST-2026-0001"}
    merged = by_id["PYSEC-2023-212"]
    assert (merged.kind, merged.source, merged.fixed, merged.note) == ("python", "python osv+pypi", "1.26.18",
                                                                       "also fixed in 2.0.7")
    assert "CVE-2023-45803" in merged.ids and merged.severity == "medium" and merged.date
    unfixed = by_id["TEST-2026-0001"]
    assert (unfixed.fixed, unfixed.note, unfixed.severity) == ("", "last affected 1.4.2", "critical")
    assert {(n.package, n.source) for n in result.not_looked_up} == {
        ("odd", "python osv"), ("odd", "python pypi"), ("osv-fixture-example", "python pypi")}

    nothing = audit_python([("urllib3", "1.26.4")], open_osv(Path("/nonexistent/all.zip"), environ={}))
    empty = nothing.into(model.AuditResult(image="img:1", image_id=""))
    assert not empty.checked() and not empty.checked("python") and not empty.findings
    (status,) = empty.sources
    assert status.state == model.NOT_CHECKED and status.detail.startswith("error: /nonexistent/all.zip")


def test_audit_command_run_with_osv_and_pypi_over_the_fake_engine(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`imagebuild audit --image img:1 --osv FIXTURE --pypi`'s run: the image's METADATA read through the one fake
    engine, OSV and PyPI (fetch replaced: no network) both consulted, PyPI asked once per project."""
    import io
    import tarfile

    from _fake_engine import FakeEngine

    import imagebuild.engine
    import imagebuild.pipeline.auditing as auditing

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in {
            "etc/os-release": 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n',
            "opt/venv/lib/python3.11/site-packages/urllib3-1.26.4.dist-info/METADATA":
                "Metadata-Version: 2.1\nName: urllib3\nVersion: 1.26.4\n",
            "opt/venv/lib/python3.11/site-packages/weird-1.dist-info/METADATA":
                "Metadata-Version: 2.1\nName: weird\nVersion: 1.0-local build\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    engine = FakeEngine()
    iid = engine.add_image("img:1", {})
    engine.filesystems[iid] = buf.getvalue()
    engine.images_by_id[iid]["Architecture"] = "amd64"
    monkeypatch.setattr(imagebuild.engine, "connect", lambda purpose: engine)
    asked: list[str] = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        return _pypi_answer("2.2.3", [])

    monkeypatch.setattr(auditing, "pypi_fetch", lambda: fetch)
    monkeypatch.delenv(ENV_OSV, raising=False)
    run = auditing.audit_images(["img:1"], None, str(tmp_path), str(FIXTURE), False, lambda m: None, pypi=True)
    (result,) = run.results
    states = {s.source: s.state for s in result.sources if s.source.startswith("python")}
    assert states == {"python osv": "checked", "python pypi": "checked"}
    assert {f.ids[0] for f in result.findings if f.kind == "python"} == {"PYSEC-2021-108", "PYSEC-2023-212"}
    assert asked == ["https://pypi.org/pypi/urllib3/json"]  # weird's version is not PEP 440: nothing to ask
    reasons = {(m.package, m.source): m.reason for m in result.not_looked_up}
    assert reasons[("urllib3", "python pypi")] == "not checked via PyPI: installed 1.26.4 is not the newest release 2.2.3"
    assert "not a PEP 440 version" in reasons[("weird", "python osv")]
    assert "PYSEC-2021-108" in run.text
