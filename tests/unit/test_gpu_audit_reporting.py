"""Issue 40 (GPU truth) and issue 42 item 5 (audit results) where they are shown: the build report's GPUs / driver /
audit columns, the catalog's per-platform GPU code and audit, the record's audits bound to the image ID they audited
(kept by `imagebuild audit -m` over the one fake engine), the CycloneDX 1.6 vulnerabilities document, the signed
audit attestation a push adds (cosign --type vuln) and `verify --max-audit-age`. "not checked" is never clean."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from imagebuild.audit.cyclonedx import vulnerabilities_bom
from imagebuild.models import describe_audit, describe_coverage, kernel_coverage
from imagebuild.record import load_record, updating
from imagebuild.record.audits import audit_entry, audit_summary, audits_problem, counts
from imagebuild.report import load_report, write_reports
from imagebuild.report.stored import ReportError
from imagebuild.sign.audit import VULN_PREDICATE_TYPE, describe_age, newest_audit, parse_age, vuln_predicate

ROOT = Path(__file__).resolve().parents[2]
OSV_FIXTURE = ROOT / "tests" / "fixtures" / "osv"
IMG = "sha256:" + "1a" * 32
OTHER = "sha256:" + "2b" * 32
AT = "2026-12-05T10:00:00Z"


def _recorded_checks(name: str) -> list[dict]:
    """The checks of a real recorded probe run (tests/fixtures/probe-results: the CPU images)."""
    doc = json.loads((ROOT / "tests" / "fixtures" / "probe-results" / name).read_text())
    return doc["verdict"]["checks"]


def _gpu_tests(image_id: str = IMG) -> dict:
    """A CUDA image's test result as the suite writes the coverage check's figures (smoke/suite/test_coverage.py)."""
    return {"image": image_id, "passed": 1, "failed": 0, "skipped": 0, "checks": [
        {"name": "coverage.kernels", "status": "passed", "reason": "ok",
         "figures": {"targets": ["sm_90", "sm_100", "sm_120"], "gpus": {"h100": "sm_90", "h200": "sm_90",
                                                                        "b200": "sm_100"},
                     "native": ["sm_90"], "ptx_jit": {"sm_100": ["libcublas.so.12"]}}}]}


def _entry(image_id: str = IMG, os_state: str = "checked", py_state: str = "checked", at: str = AT) -> dict:
    doc = {"image": "pytorch:2.13-runtime", "image_id": image_id,
           "sources": [{"source": "debian-security bookworm-security", "state": os_state, "detail": "index",
                        "date": "2026-12-04"},
                       {"source": "python osv", "state": py_state, "detail": "osv db", "date": ""}],
           "findings": [{"source": "debian-security bookworm-security", "kind": "os", "package": "libssl3",
                         "installed": "3.0.11-1~deb12u2", "fixed": "3.0.15-1~deb12u1", "ids": ["CVE-2024-5535"],
                         "severity": "unknown", "source_package": "openssl", "date": "2026-12-04", "note": "",
                         "violates": True},
                        {"source": "python osv", "kind": "python", "package": "urllib3", "installed": "1.26.4",
                         "fixed": "1.26.5", "ids": ["PYSEC-2021-108", "CVE-2021-33503", "GHSA-q2q7-5pp4-w6pg"],
                         "severity": "high", "source_package": "", "date": "", "note": "", "violates": False}],
           "not_looked_up": []}
    if os_state != "checked":
        doc["findings"] = [f for f in doc["findings"] if f["kind"] != "os"]
    return audit_entry(doc, at, "0.1.0")


# -- GPU coverage cells ------------------------------------------------------------------------------------------

def test_coverage_names_native_ptx_and_no_code_per_target():
    cov = kernel_coverage(_gpu_tests(), IMG)
    assert cov == {"state": "checked", "gpus": {"h100": "sm_90", "h200": "sm_90", "b200": "sm_100"},
                   "native": ["sm_90"], "ptx_jit": ["sm_100"], "none": ["sm_120"]}
    assert describe_coverage(cov, "h100=9.0") == ("native: h100, h200 (sm_90) · PTX JIT only: b200 (sm_100) · "
                                                  "no code: sm_120")


def test_coverage_not_checked_for_a_cpu_image_no_test_or_another_image():
    cpu = kernel_coverage({"image": IMG, "checks": _recorded_checks("cpu-runtime.json")}, IMG)
    assert cpu["state"] == "not checked" and "built without CUDA" in cpu["why"]  # the real recorded reason
    assert describe_coverage(cpu, None).startswith("not checked (no CUDA libraries")
    assert describe_coverage(kernel_coverage(None, IMG), None) == "not checked (no target GPUs)"
    assert describe_coverage(kernel_coverage(None, IMG), "h100=9.0") == "not checked (not tested)"
    other = kernel_coverage(_gpu_tests(OTHER), IMG)
    assert other["state"] == "not checked" and "another image" in other["why"]
    # damaged figures: never a traceback, never "checked" with nothing in it
    assert kernel_coverage({"checks": [{"name": "coverage.kernels", "status": "passed", "figures": {"targets": 3}}]},
                           IMG)["state"] == "not checked"


# -- record: audits bound to the image ID ------------------------------------------------------------------------

def test_audit_counts_and_not_checked_halves():
    assert counts(_entry())["security_fixes"] == 1 and counts(_entry())["python"] == 1
    assert counts(_entry())["violations"] == 1
    half = counts(_entry(os_state="not checked"))
    assert half["security_fixes"] is None and half["python"] == 1  # not checked, never 0
    assert half["not_checked"] == ["debian-security bookworm-security: index"]


def test_audit_summary_is_only_of_exactly_that_image_id():
    audits = {IMG: _entry()}
    assert audit_summary(audits, IMG)["image_id"] == IMG
    assert audit_summary(audits, OTHER) is None
    assert audit_summary({OTHER: _entry(IMG)}, OTHER) is None  # kept under another key: not that image's
    assert describe_audit(audit_summary(audits, IMG), IMG) == ("security fixes 1 · Python 1 (1 violating the "
                                                               "policy) (audited 2026-12-05)")
    assert describe_audit(audit_summary(audits, IMG), OTHER) == "not checked"
    assert describe_audit(None, IMG) == "not checked"
    assert describe_audit(audit_summary({IMG: _entry(os_state="not checked", py_state="error")}, IMG), IMG) \
        .startswith("security fixes not checked · Python not checked")


def test_record_keeps_audits_and_names_a_damaged_one(tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("x: 1\n")
    with updating(matrix, directory=tmp_path) as rec:
        rec.audits[IMG] = _entry()
    again = load_record(matrix, tmp_path)
    assert again is not None and again.problem is None and again.audits[IMG]["findings"][0]["package"] == "libssl3"
    path = tmp_path / "m.state.json"
    doc = json.loads(path.read_text())
    doc["audits"][IMG]["image_id"] = OTHER
    path.write_text(json.dumps(doc))
    bad = load_record(matrix, tmp_path)
    assert bad is not None and bad.audits == {} and f"audits.{IMG}.image_id must be" in bad.problem
    assert audits_problem({IMG: {**_entry(), "at": "yesterday"}}).startswith(f"audits.{IMG}:")
    assert audits_problem({IMG: {**_entry(), "findings": [{"package": 3}]}}).endswith("must be a string")
    assert audits_problem([1]) == "'audits' must be an object"
    assert audits_problem({IMG: _entry()}) is None


def _image_tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_matrix_audit_keeps_each_result_under_the_image_id_it_audited(tmp_path, monkeypatch):
    """`imagebuild audit -m images/cpu.yaml --osv FIXTURE` over the one fake engine: the base image (urllib3
    1.26.4, no dpkg database) is audited and its result kept under its image ID; the images not built are not."""
    from _fake_engine import FakeEngine

    import imagebuild.engine
    import imagebuild.pipeline.auditing as auditing
    from imagebuild.audit.debian import SecurityIndexes
    from imagebuild.pipeline.loaded import load
    from imagebuild.record import ImageRecord

    matrix = str(ROOT / "images" / "cpu.yaml")
    state = tmp_path / "state"
    loaded = load(matrix, None, None, str(state), lambda m: None)
    runtime = next(i for i in loaded.plan.images if i.flavor == "base")  # a root: found by its labels alone
    engine = FakeEngine()
    from imagebuild.builder.uptodate import INPUTS_LABEL

    iid = engine.add_image(runtime.tag, {**runtime.labels, INPUTS_LABEL: runtime.inputs_hash})
    engine.filesystems[iid] = _image_tar({
        "etc/os-release": 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n',
        "opt/venv/lib/python3.11/site-packages/urllib3-1.26.4.dist-info/METADATA":
            "Metadata-Version: 2.1\nName: urllib3\nVersion: 1.26.4\n"})
    engine.images_by_id[iid]["Architecture"] = "amd64"
    monkeypatch.setattr(imagebuild.engine, "connect", lambda purpose: engine)

    def offline(url: str, timeout: float) -> bytes:
        raise OSError("offline")

    monkeypatch.setattr(auditing, "SecurityIndexes", lambda tables: SecurityIndexes(tables, fetch=offline,
                                                                                   cache=tmp_path))
    monkeypatch.delenv("IMAGEBUILD_OSV_DB", raising=False)
    said: list[str] = []
    # no record of the matrix yet: nothing kept, and said
    auditing.audit_images([], matrix, str(state), str(OSV_FIXTURE), False, said.append)
    assert any("the audit results are not kept" in m for m in said) and load_record(matrix, state) is None
    with updating(matrix, directory=state) as rec:
        rec.images[runtime.id] = ImageRecord(id=runtime.id, flavor="base", inputs_hash=runtime.inputs_hash,
                                             image_id=iid, status="built")
    monkeypatch.chdir(tmp_path)  # the matrix's default report folder: reports/cpu/ under here
    write_reports([_row(iid, tag=runtime.tag), _row(OTHER)], tmp_path / "reports" / "cpu")
    run = auditing.audit_images([], matrix, str(state), str(OSV_FIXTURE), False, said.append)
    assert run.exit_code == 1  # urllib3's advisories at or above the default python severity
    rec = load_record(matrix, state)
    assert rec is not None and rec.problem is None and list(rec.audits) == [iid]
    summary = audit_summary(rec.audits, iid)
    assert summary["security_fixes"] is None  # no dpkg database: the OS half not checked, never 0
    assert summary["python"] == len([f for f in run.json[0]["findings"] if f["kind"] == "python"]) > 0
    # the last run's report: the audited image's row has the counts now, the other image's row none
    report = load_report(tmp_path / "reports" / "cpu")
    assert [r.get("audit") for r in report["images"]] == [summary, None]
    md = (tmp_path / "reports" / "cpu" / "build-report.md").read_text()
    assert f"security fixes not checked · Python {summary['python']}" in md and md.count("| not checked |") == 1
    # the report rows of a later run: the audit of exactly their image ID
    from imagebuild.models import ImageResult
    from imagebuild.record.update import fill_row

    row = fill_row(rec, runtime, ImageResult.of(runtime))
    assert row.image_id == iid and row.audit == summary
    rec.images[runtime.id].image_id = OTHER  # a rebuild made another image: its row shows no audit
    assert fill_row(rec, runtime, ImageResult.of(runtime)).audit is None


# -- the build report --------------------------------------------------------------------------------------------

def _row(image_id: str, **over) -> dict:
    return {"tag": f"reg.test/ml/pytorch:{image_id[7:11]}", "flavor": "runtime", "inputs_hash": "h", "versions": {},
            "status": "built", "image_id": image_id, **over}


def test_report_columns_gpus_driver_audit(tmp_path):
    rows = [
        _row(IMG, gpus="h100=9.0,b200=10.0", min_driver="570.26", tests=_gpu_tests(), audit=audit_summary(
            {IMG: _entry()}, IMG)),
        _row(OTHER, tests={"image": OTHER, "checks": _recorded_checks("cpu-runtime.json"), "passed": 1},
             audit=audit_summary({IMG: _entry()}, IMG)),  # an audit of another image ID: not this row's
        _row("sha256:" + "3c" * 32, gpus="h100=9.0", min_driver="570.26"),  # not tested, not audited
    ]
    paths = write_reports(rows, tmp_path)
    md = paths["md"].read_text()
    header = next(line for line in md.splitlines() if line.startswith("| image"))
    assert "| GPUs | driver | audit |" in header
    lines = [line for line in md.splitlines() if line.startswith("| `")]
    assert "native: h100, h200 (sm\\_90)" in lines[0] or "native: h100, h200 (sm_90)" in lines[0]
    assert "PTX JIT only: b200 (sm_100)" in lines[0] and "≥ 570.26" in lines[0]
    assert "security fixes 1 · Python 1" in lines[0]
    assert "not checked (no CUDA libraries: torch 2.13.0+cpu is built without CUDA)" in lines[1]
    assert "not needed (no target GPUs)" in lines[1]
    assert lines[1].count("not checked") == 2 and "security fixes" not in lines[1]
    assert "not checked (not tested)" in lines[2] and lines[2].rstrip(" |").endswith("–")
    doc = load_report(tmp_path)
    assert doc["images"][0]["coverage"]["native"] == ["sm_90"] and doc["images"][0]["audit"]["python"] == 1
    assert doc["images"][2]["coverage"] == {"state": "not checked", "why": "not tested"}


def test_damaged_audit_in_a_report_is_one_error_line(tmp_path):
    write_reports([_row(IMG, audit=audit_summary({IMG: _entry()}, IMG))], tmp_path)
    path = tmp_path / "build-report.json"
    doc = json.loads(path.read_text())
    doc["images"][0]["audit"]["security_fixes"] = "0"
    path.write_text(json.dumps(doc))
    with pytest.raises(ReportError, match=r"images\[0\]\.audit\.security_fixes: expected a number or null"):
        load_report(tmp_path)


# -- the catalog -------------------------------------------------------------------------------------------------

class _Reader:
    """Manifests and config blobs as a registry serves them (catalog.RegistryReader)."""

    def __init__(self) -> None:
        self.manifests: dict[tuple[str, str], tuple[str, dict]] = {}
        self.blobs: dict[tuple[str, str], bytes] = {}

    def put(self, repo: str, ref: str | None, doc: dict) -> str:
        digest = "sha256:" + hashlib.sha256(json.dumps(doc).encode()).hexdigest()
        for key in {digest, ref or digest}:
            self.manifests[(repo, key)] = (digest, doc)
        return digest

    def image(self, repo: str, labels: dict, arch: str) -> tuple[str, str]:
        """(manifest digest, config digest) of a one-layer image of `arch`."""
        config = json.dumps({"architecture": arch, "os": "linux", "config": {"Labels": labels},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        self.blobs[(repo, config_digest)] = config
        return self.put(repo, None, {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                       "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "size": 7,
                        "digest": "sha256:" + "07" * 32}]}), config_digest

    def manifest(self, repository: str, reference: str):
        return self.manifests.get((repository, reference))

    def blob(self, repository: str, digest: str, max_bytes: int = 16 << 20) -> bytes:
        return self.blobs[(repository, digest)]


def test_catalog_per_platform_gpu_code_driver_and_audit(tmp_path):
    from imagebuild.catalog import Header, collect, render_json, render_markdown
    from imagebuild.plan import make_plan

    reg = "reg.test:5000/ml"
    plan = make_plan(ROOT / "images" / "cpu.yaml", None, reg)
    base = plan.images[0]
    reader = _Reader()
    repo = base.repository.split("/", 1)[1]
    labels = {**base.labels, "io.imagebuild.gpus": "h100=9.0,b200=10.0", "io.imagebuild.min-driver": "570.26"}
    amd, amd_id = reader.image(repo, labels, "amd64")
    arm, arm_id = reader.image(repo, labels, "arm64")
    reader.put(repo, base.short_tag, {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                                      "manifests": [
        {"digest": amd, "size": 1, "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": arm, "size": 1, "platform": {"os": "linux", "architecture": "arm64"}}]})
    record = tmp_path / "cpu.state.json"
    gpu_run = {**_gpu_tests(amd_id), "image_id": amd_id, "at": AT, "where": "cpu", "checks": []}
    gpu_run["cases"] = _gpu_tests(amd_id)["checks"]  # the record keeps every case with its figures
    record.write_text(json.dumps({
        "schema": 1, "tool_version": "0.1.0", "matrix": "images/cpu.yaml", "inputs": {}, "registry": reg,
        "images": {base.id: {"id": base.id, "flavor": "base", "inputs_hash": "h", "image_id": amd_id}},
        "tests": {"k1": gpu_run},
        # arm64's audit is kept under its key but names another image: not shown as arm64's
        "audits": {amd_id: _entry(amd_id), arm_id: {**_entry(amd_id)}}}))
    entries = collect(plan, lambda host: reader, record)
    e = entries[0]
    assert set(e.platforms) == {"linux/amd64", "linux/arm64"}
    assert e.platforms["linux/amd64"]["coverage"]["native"] == ["sm_90"]
    assert e.platforms["linux/amd64"]["audit"]["security_fixes"] == 1
    assert e.platforms["linux/arm64"]["coverage"]["state"] == "not checked"
    assert e.platforms["linux/arm64"]["audit"] is None
    header = Header("images/cpu.yaml", reg, (base.repository,), AT, str(record))
    md = render_markdown(entries, header)
    row = next(line for line in md.splitlines() if line.startswith(f"| `{e.tag}`"))
    assert "linux/amd64: native: h100, h200 (sm\\_90) · PTX JIT only: b200 (sm\\_100) · no code: sm\\_120" in row
    assert "linux/arm64: not checked (no local record of this image)" in row
    assert "linux/amd64: security fixes 1 · Python 1" in row and "linux/arm64: not checked" in row
    assert "| 570.26 |" in row
    not_pushed = next(line for line in md.splitlines() if line.startswith(f"| `{plan.images[1].short_tag}`"))
    assert not_pushed.count("not checked (not pushed)") == 2
    doc = json.loads(render_json(entries, header))
    assert doc["entries"][0]["platforms"]["linux/arm64"]["audit"] is None


# -- CycloneDX 1.6 vulnerabilities -------------------------------------------------------------------------------

def _validate(doc: dict) -> None:
    pytest.importorskip("cyclonedx", reason="cyclonedx-python-lib (dev extra) validates the schema")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(doc))
    assert error is None, str(error)


def test_vulnerabilities_document_validates_and_names_what_was_not_checked():
    bom = vulnerabilities_bom(_entry(os_state="not checked"))
    _validate(bom)
    assert bom["specVersion"] == "1.6" and bom["metadata"]["timestamp"] == AT
    (vuln,) = bom["vulnerabilities"]
    assert vuln["id"] == "PYSEC-2021-108" and {r["id"] for r in vuln["references"]} == {"CVE-2021-33503",
                                                                                         "GHSA-q2q7-5pp4-w6pg"}
    assert vuln["ratings"][0]["severity"] == "high" and vuln["affects"][0]["ref"] == "pkg:pypi/urllib3@1.26.4"
    props = {p["name"]: p["value"] for p in bom["metadata"]["properties"]}
    assert props["imagebuild:audit:not-checked"].startswith("debian-security bookworm-security")
    full = vulnerabilities_bom(_entry())
    _validate(full)
    assert [v["id"] for v in full["vulnerabilities"]] == ["CVE-2024-5535", "PYSEC-2021-108"]
    assert full["components"][0]["purl"] == "pkg:deb/debian/libssl3@3.0.11-1~deb12u2"
    assert vulnerabilities_bom(_entry()) == full  # deterministic


def test_the_schema_check_can_fail():
    bom = vulnerabilities_bom(_entry())
    bom["vulnerabilities"][0]["ratings"][0]["severity"] = "catastrophic"
    with pytest.raises(AssertionError):
        _validate(bom)


# -- the signed audit attestation and verify --max-audit-age -----------------------------------------------------

def _statement(digest: str, at: str | None, result: dict | None = None) -> dict:
    pred = vuln_predicate(_entry(at=at or AT), vulnerabilities_bom(_entry(at=at or AT)))
    if result is not None:
        pred["scanner"]["result"] = result
    if at is None:
        del pred["metadata"]["scanFinishedOn"]
    return {"predicateType": VULN_PREDICATE_TYPE, "subject": [{"digest": {"sha256": digest.split(":")[1]}}],
            "predicate": pred}


def test_vuln_predicate_shape_and_secrets_masked():
    from imagebuild.secrets import register_secret

    register_secret("s3cr3t-token-42")
    entry = _entry()
    entry["sources"][1]["detail"] = "https://ci:s3cr3t-token-42@pypi.corp/simple project JSON"
    pred = vuln_predicate(entry, vulnerabilities_bom(entry))
    assert pred["metadata"]["scanFinishedOn"] == AT and pred["scanner"]["result"]["bomFormat"] == "CycloneDX"
    assert set(pred) == {"invocation", "scanner", "metadata"}  # cosign's vuln predicate fields
    assert "s3cr3t-token-42" not in json.dumps(pred)
    assert pred["scanner"]["result"]["metadata"]["properties"][0]["value"] == IMG  # hashes kept whole


@pytest.mark.parametrize("text,seconds", [("7d", 604800), ("12h", 43200), ("30m", 1800), ("2w", 1209600),
                                          ("90s", 90)])
def test_parse_age(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "-1d", "0d", "7y", "1.5d"])
def test_parse_age_refuses(text):
    from imagebuild.errors import UsageError

    with pytest.raises(UsageError, match="--max-audit-age .*s, m, h, d or w"):
        parse_age(text)


def test_newest_audit_fresh_stale_and_none():
    digest = "sha256:" + "ab" * 32
    now = datetime(2026, 12, 10, 10, 0, tzinfo=timezone.utc)
    old, new = _statement(digest, "2026-11-01T10:00:00Z"), _statement(digest, "2026-12-08T10:00:00Z")
    assert newest_audit([old, new], "img", digest, 7 * 86400, "7d", now) is new
    with pytest.raises(ValueError) as stale:
        newest_audit([old, new], "img", digest, 86400, "1d", now)
    assert str(stale.value) == (f"img: the newest audit attestation of {digest} is 2d 0h old (audited "
                                "2026-12-08T10:00:00Z), older than --max-audit-age 1d")
    for none in ([], [_statement(digest, None)], [_statement(digest, AT, result={"not": "cyclonedx"})]):
        with pytest.raises(ValueError, match=f"no audit attestation of {digest} was found.*never clean"):
            newest_audit(none, "img", digest, 86400, "1d", now)
    assert describe_age(59) == "59s" and describe_age(3700) == "1h 1m"
    ahead = _statement(digest, "2026-12-10T10:04:00Z")  # within the clock skew allowed: fresh
    assert newest_audit([ahead], "img", digest, 86400, "1d", now) is ahead
    with pytest.raises(ValueError, match=r"dated 2026-12-11T10:00:00Z, 1d 0h in the future"):
        newest_audit([_statement(digest, "2026-12-11T10:00:00Z")], "img", digest, 86400, "1d", now)


def _cosign(statements: dict[str, list[dict]], missing_vuln: set[str] = frozenset()):
    """run_cosign as cosign answers: signatures and SBOM/provenance for every digest, vuln statements as given."""
    from imagebuild.sign.cosign import CosignResult
    from imagebuild.sign.signer import PREDICATE_TYPES

    asked: list[list[str]] = []

    def run(args, **_kw):
        asked.append(list(args))
        digest = args[-1].split("@", 1)[1]
        if args[0] == "verify":
            return CosignResult(0, json.dumps([{"critical": {"image": {"docker-manifest-digest": digest}}}]), "")
        if args[0] == "attest":
            return CosignResult(0, "", "")
        kind = args[args.index("--type") + 1]
        if kind == "vuln":
            found = statements.get(digest) or []
            if digest in missing_vuln or not found:
                return CosignResult(1, "", "Error: none of the attestations matched the predicate type: vuln")
            sts = found
        else:
            sts = [{"predicateType": PREDICATE_TYPES[kind], "subject": [{"digest": {"sha256": digest.split(":")[1]}}]}]
        lines = [json.dumps({"payload": base64.b64encode(json.dumps(st).encode()).decode()}) for st in sts]
        return CosignResult(0, "\n".join(lines), "")

    return run, asked


def _index_registry():
    """A fake registry whose tag names an OCI index of two platform images."""
    from _fake_registry import FakeRegistry

    reg = FakeRegistry("reg.example:5000")
    members = {}
    for arch in ("amd64", "arm64"):
        config = reg.put_blob(json.dumps({"os": "linux", "architecture": arch}).encode())
        body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"digest": config, "size": 2}, "layers": []}).encode()
        members[arch] = reg.put_manifest("ml/pytorch", None, body)
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d,
                                       "size": 1, "platform": {"os": "linux", "architecture": a}}
                                      for a, d in members.items()]}).encode()
    return reg, reg.put_manifest("ml/pytorch", "2.9-base", index), members


def test_verify_max_audit_age_on_an_image_and_an_index(monkeypatch):
    from imagebuild.sign import verify as verify_mod
    from imagebuild.sign.cosign import Registry
    from imagebuild.sign.keys import PublicKey

    monkeypatch.setattr("imagebuild.sign.refusals.envelope_problem", lambda *a, **k: None)  # no .att to read
    reg, index, members = _index_registry()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    fresh = {d: [_statement(d, "2020-01-01T00:00:00Z"), _statement(d, now)] for d in members.values()}
    run, _ = _cosign(fresh)
    monkeypatch.setattr(verify_mod, "run_cosign", run)
    key, registry = PublicKey("cosign.pub"), Registry("reg.example:5000")
    ref = "reg.example:5000/ml/pytorch:2.9-base"
    got = verify_mod.verify_reference(ref, key, registry, reg, (7 * 86400, "7d"))
    assert set(got.audits) == set(members.values())
    assert all(st["predicate"]["metadata"]["scanFinishedOn"] == now for st in got.audits.values())
    assert verify_mod.verify_reference(ref, key, registry, reg).audits == {}  # not asked: not required
    # arm64's newest audit too old: one error naming that platform image's digest, the age and the limit
    stale = {**fresh, members["arm64"]: [_statement(members["arm64"], "2020-01-01T00:00:00Z")]}
    monkeypatch.setattr(verify_mod, "run_cosign", _cosign(stale)[0])
    with pytest.raises(verify_mod.VerifyError, match=rf"\(linux/arm64\): the newest audit attestation of "
                                                     rf"{members['arm64']} is \d+d \d+h old .*--max-audit-age 7d"):
        verify_mod.verify_reference(ref, key, registry, reg, (7 * 86400, "7d"))
    # none attached: an error saying none was found
    monkeypatch.setattr(verify_mod, "run_cosign", _cosign({})[0])
    with pytest.raises(verify_mod.VerifyError, match=rf"no audit attestation of {members['amd64']} was found"):
        verify_mod.verify_reference(ref, key, registry, reg, (7 * 86400, "7d"))
    # an audit attestation made for another digest is refused as such, not taken as this image's
    copied = {d: [_statement(index, now)] for d in members.values()}
    monkeypatch.setattr(verify_mod, "run_cosign", _cosign(copied)[0])
    with pytest.raises(verify_mod.VerifyError, match="made for another digest"):
        verify_mod.verify_reference(ref, key, registry, reg, (7 * 86400, "7d"))


def test_verify_command_bad_age_is_one_error_line(tmp_path):
    import os
    import subprocess
    import sys

    pub = tmp_path / "cosign.pub"
    pub.write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DOCKER_CONFIG": "/nonexistent-docker-config"}
    done = subprocess.run([sys.executable, "-m", "imagebuild", "verify", "reg.example:5000/ml/x:1", "--key", str(pub),
                           "--max-audit-age", "soon"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["error: --max-audit-age 'soon': give a positive number with a unit: s, m, h, d or w (e.g. 7d)"]


def test_sign_digest_attests_the_audit_once_per_audit_time(monkeypatch):
    from imagebuild.sign import signer
    from imagebuild.sign import verify as verify_mod
    from imagebuild.sign.cosign import Registry
    from imagebuild.sign.keys import SigningKey

    monkeypatch.setattr("imagebuild.sign.refusals.envelope_problem", lambda *a, **k: None)  # no .att to read
    digest = "sha256:" + "cd" * 32
    ref = f"reg.example:5000/ml/x@{digest}"
    predicate = vuln_predicate(_entry(), vulnerabilities_bom(_entry()))
    run, asked = _cosign({})
    monkeypatch.setattr(signer, "run_cosign", run)
    monkeypatch.setattr(verify_mod, "run_cosign", run)
    key = SigningKey("cosign.key", "pw")
    pem = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
    signed = signer.sign_digest(ref, key, Registry("reg.example:5000"), sbom={}, provenance={}, public_key_pem=pem,
                                audit=predicate)
    attests = [a for a in asked if a[0] == "attest"]
    assert [a[a.index("--type") + 1] for a in attests] == ["vuln"]  # SBOM/provenance stood: kept, not repeated
    assert signed.attestations == ("cyclonedx", "slsaprovenance1", "vuln") and "vuln" not in signed.kept
    # the same audit already attested by this key: not added again; without an audit: no vuln attestation
    run, asked = _cosign({digest: [_statement(digest, AT)]})
    monkeypatch.setattr(signer, "run_cosign", run)
    monkeypatch.setattr(verify_mod, "run_cosign", run)
    again = signer.sign_digest(ref, key, Registry("reg.example:5000"), sbom={}, provenance={}, public_key_pem=pem,
                               audit=predicate)
    assert "vuln" in again.kept and not [a for a in asked if a[0] == "attest"]
    plain = signer.sign_digest(ref, key, Registry("reg.example:5000"), sbom={}, provenance={}, public_key_pem=pem)
    assert plain.attestations == ("cyclonedx", "slsaprovenance1")


def test_push_attests_only_the_audit_of_exactly_the_pushed_image_id(tmp_path):
    """pipeline/signing's choice: the record's audit of the pushed image ID becomes the vuln predicate; an audit of
    another image ID (kept under its own key or under this one) is not attached, and that is said."""
    from imagebuild.pipeline.loaded import RecordBook
    from imagebuild.pipeline.signing import _audit_predicate
    from imagebuild.plan import make_plan
    from imagebuild.record.store import Record

    image = make_plan(ROOT / "images" / "cpu.yaml", None, "reg.test:5000/ml").images[1]
    rec = Record(matrix="images/cpu.yaml", matrix_digest=None, inputs={}, registry=None)
    rec.audits = {IMG: _entry(IMG), OTHER: _entry(IMG)}
    book = RecordBook(tmp_path / "cpu.yaml", str(tmp_path), rec)
    said: list[str] = []
    pred = _audit_predicate(book, image, IMG, said.append)
    assert pred is not None and pred["scanner"]["result"]["metadata"]["properties"][0]["value"] == IMG
    assert pred["metadata"]["scanFinishedOn"] == AT and said == []
    assert _audit_predicate(book, image, OTHER, said.append) is None
    assert _audit_predicate(book, image, "sha256:" + "4d" * 32, said.append) is None
    assert len(said) == 2 and all("no audit attestation attached" in m for m in said)


def test_verify_command_says_the_audit_it_required(tmp_path, monkeypatch):
    """verify --max-audit-age's output: the audit's time, its vulnerabilities and what it did not check; the age
    given reaches check_image as seconds with the user's words."""
    from click.testing import CliRunner

    from imagebuild.commands.verify import command
    from imagebuild.sign.signer import PREDICATE_TYPES
    from imagebuild.sign.verify import Verified

    digest = "sha256:" + "5e" * 32
    st = {k: {"predicateType": v, "predicate": {"specVersion": "1.6"}} for k, v in PREDICATE_TYPES.items()}
    audit = _statement(digest, AT)
    audit["predicate"] = vuln_predicate(_entry(os_state="not checked"), vulnerabilities_bom(_entry(os_state="not checked")))
    verified = Verified("r/x:1", f"r/x@{digest}", digest, "x", st, audits={digest: audit})
    asked: list[object] = []

    def check(*a, **k):
        asked.append(k.get("max_audit_age"))
        return verified

    monkeypatch.setattr("imagebuild.sign.verify.check_image", check)
    (tmp_path / "cosign.pub").write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")
    args = ["r/x:1", "--key", str(tmp_path / "cosign.pub"), "--max-audit-age", "7d"]
    text = CliRunner().invoke(command, args, standalone_mode=False)
    assert text.exception is None, text.output
    assert asked == [(604800, "7d")]
    assert (f"  audit of {digest[:19]}: {AT}, 1 vulnerabilities listed, not checked: debian-security "
            "bookworm-security: index") in text.output
    doc = json.loads(CliRunner().invoke(command, [*args, "--json"], standalone_mode=False).output)
    assert doc["audits"][digest]["vulnerabilities"] == 1 and doc["audits"][digest]["audited"] == AT
