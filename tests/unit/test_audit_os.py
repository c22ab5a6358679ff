"""Issue 42 items 1 and 6 (OS half): dpkg packages against the REAL bookworm-security index (signed InRelease
verified with the pinned keys, Packages.xz checked against it), Debian version order proven equal to dpkg's, and the
index refused when it is not what the pinned keys signed."""

from __future__ import annotations

import dataclasses
import random
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from _security_index import packages_text, real_indexes, stanzas_of, status_file, tar_of

from imagebuild.audit.debian import IndexUnavailable, SecurityIndexes, Suite, suite_for
from imagebuild.audit.model import CHECKED, NOT_CHECKED
from imagebuild.audit.os import Changelogs, Installed, audit_os, changelog_url, compare, ids_since
from imagebuild.compat import load as load_tables
from imagebuild.inventory.dpkg import parse_status
from imagebuild.lock.apt import compare_versions

NO_LOGS = Changelogs(None)


def test_real_index_reports_a_replaced_libssl3_with_the_fixed_version():
    indexes, index = real_indexes()
    assert index.suite.suite == "bookworm-security" and len(index.binaries) > 1000  # ~3000 binaries
    current = index.binaries["libssl3"].version
    text = packages_text(index, indexes)
    stanzas = stanzas_of(text, {"libssl3", "openssl", "libc6", "libc-bin"} & set(index.binaries))
    assert {"libssl3", "openssl"} <= set(stanzas)
    old = "3.0.11-1~deb12u2"  # a real bookworm (12.4) libssl3, long replaced by the security suite
    assert compare_versions(old, current) < 0
    debs = parse_status(status_file(stanzas, {"libssl3": old}))  # the inventory's own dpkg reader
    got = audit_os("debian", "bookworm", "amd64",
                   [Installed(d.name, d.version, d.architecture, d.source, d.source_version) for d in debs],
                   indexes, NO_LOGS)
    assert got.status.state == CHECKED and got.status.source == "debian-security bookworm-security"
    assert got.status.date == index.date and "signed" in got.status.detail
    assert [(f.package, f.installed, f.fixed, f.source_package) for f in got.findings] == \
        [("libssl3", old, current, "openssl")]
    assert got.findings[0].date == index.date and "ids not read" in got.findings[0].note

    clean = parse_status(status_file(stanzas, {}))  # the same packages at the suite's current versions
    got = audit_os("debian", "bookworm", "amd64",
                   [Installed(d.name, d.version, d.architecture, d.source, d.source_version) for d in clean],
                   indexes, NO_LOGS)
    assert got.status.state == CHECKED and got.findings == () and got.not_looked_up == ()


def test_a_binary_the_suite_no_longer_builds_is_matched_by_its_source():
    indexes, index = real_indexes()
    debs = [Installed("libssl1.9-imaginary", "3.0.11-1~deb12u2", "amd64", "openssl", "")]
    findings, missed = compare(index, debs, NO_LOGS)
    assert [(f.package, f.fixed) for f in findings] == [("libssl1.9-imaginary", index.sources["openssl"])]
    assert "no longer builds" in findings[0].note and missed == []
    findings, missed = compare(index, [Installed("libssl3", "3.0.11-1~deb12u2 bad", "amd64")], NO_LOGS)
    assert findings == [] and missed[0].package == "libssl3" and "Debian version" in missed[0].reason


def test_dpkg_version_order_equals_dpkg_compare_versions_on_real_pairs():
    if shutil.which("dpkg") is None:
        pytest.skip("dpkg is not installed here")
    _, index = real_indexes()
    versions = sorted({o.version for o in index.binaries.values()} | set(index.sources.values()))
    status = Path("/var/lib/dpkg/status")
    if status.is_file():
        versions += [d.version for d in parse_status(status.read_text("utf-8", "replace"))]
    tricky = ["1.0~rc1-1", "1.0-1", "1.0", "1:0.9", "1.0+dfsg-1", "1.0-1~deb12u1", "1.0-1+deb12u1", "1.0a", "1.0~",
              "2:1.0", "0:1.0", "1.00", "1.0.0", "1.0-0", "1.0-1.1", "1.0~~", "1.0~a", "1.0+", "1.0-1build1"]
    rng = random.Random(42)
    pairs = [(a, b) for a in tricky for b in tricky]
    pairs += [tuple(rng.sample(versions, 2)) for _ in range(300)]  # type: ignore[misc]
    # same package, neighbouring versions: the pairs where order matters most
    pairs += [(versions[i], versions[i + 1]) for i in range(0, min(len(versions) - 1, 400), 4)]
    assert len(pairs) >= 500
    wrong = []
    for a, b in pairs:
        lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
        eq = subprocess.run(["dpkg", "--compare-versions", a, "eq", b]).returncode == 0 if not lt else False
        want = -1 if lt else (0 if eq else 1)
        if compare_versions(a, b) != want:
            wrong.append((a, b, want))
    assert wrong == []


def test_index_not_signed_by_a_pinned_key_or_not_matching_is_not_checked(tmp_path):
    indexes, index = real_indexes()
    tables = load_tables()
    suite = suite_for(tables, "debian", "bookworm", "amd64")
    assert suite is not None
    signed = indexes.fetch(f"{suite.base}/dists/{suite.suite}/InRelease", 20.0)
    now = indexes.now

    def serve(inrelease: bytes, packages: bytes | None = None):
        def fetch(url: str, timeout: float) -> bytes:
            if url.endswith("InRelease"):
                return inrelease
            if packages is None:
                raise OSError("connection refused")
            return packages
        return SecurityIndexes(tables, fetch=fetch, cache=tmp_path / "c", now=now)

    tampered = signed.replace(b"Package", b"Packagf", 1) if b"Package" in signed else signed.replace(b"main/", b"mian/", 1)
    with pytest.raises(IndexUnavailable, match="not signed by a pinned archive key"):
        serve(tampered).get(suite)
    # no pinned keys for the OS: never trusted
    with pytest.raises(IndexUnavailable, match="no archive key fingerprints"):
        serve(signed).get(dataclasses.replace(suite, archive_keys=()))
    # only another key pinned: the archive's signatures are not ours
    with pytest.raises(IndexUnavailable, match="not signed by a pinned archive key"):
        serve(signed).get(dataclasses.replace(suite, archive_keys=(tables.os["ubuntu24.04"].archive_keys[0],),
                                              keyring="ubuntu-archive.asc"))
    with pytest.raises(IndexUnavailable, match="sha256/size differ from the signed InRelease"):
        serve(signed, b"\xfd7zXZ\x00 not the index").get(suite)
    with pytest.raises(IndexUnavailable, match="not reachable"):
        serve(signed, None).get(suite)
    later = SecurityIndexes(tables, fetch=lambda u, t: signed, cache=indexes.cache,
                            now=datetime(2099, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(IndexUnavailable, match="expired"):
        later.get(suite)
    assert index.inrelease_sha256 and index.date.endswith("Z")


def test_unknown_os_and_unreachable_suite_say_not_checked(tmp_path):
    tables = load_tables()

    def down(url: str, timeout: float) -> bytes:
        raise OSError("Name or service not known")

    indexes = SecurityIndexes(tables, fetch=down, cache=tmp_path)
    debs = [Installed("libssl3", "3.0.11-1~deb12u2", "amd64", "openssl")]
    got = audit_os("debian", "bookworm", "amd64", debs, indexes, NO_LOGS)
    assert got.status.state == NOT_CHECKED and "not reachable" in got.status.detail and got.findings == ()
    got = audit_os("alpine", "3.20", "amd64", debs, indexes, NO_LOGS)
    assert got.status.state == NOT_CHECKED and "no security suite known" in got.status.detail
    got = audit_os("debian", "bookworm", "amd64", [], indexes, NO_LOGS)
    assert got.status.state == NOT_CHECKED and "no dpkg database" in got.status.detail


def test_ubuntu_arm64_reads_the_ports_mirror():
    tables = load_tables()
    s = suite_for(tables, "ubuntu", "noble", "arm64")
    assert isinstance(s, Suite) and s.base == "http://ports.ubuntu.com/ubuntu-ports" and s.components == ("main", "universe")
    s = suite_for(tables, "debian", "trixie", "amd64")
    assert s is not None and s.base == "http://deb.debian.org/debian-security" and s.suite == "trixie-security"


CHANGELOG = """openssl (3.0.17-1~deb12u3) bookworm-security; urgency=medium

  * CVE-2025-9230: out-of-bounds read in kek unwrapping
  * CVE-2025-9232 (DSA-6015-1)

 -- Maintainer <m@example.org>  Tue, 30 Sep 2025 12:00:00 +0000

openssl (3.0.17-1~deb12u2) bookworm; urgency=medium

  * CVE-2025-4575

 -- Maintainer <m@example.org>  Mon, 01 Jul 2025 12:00:00 +0000
"""


def test_changelog_ids_are_the_entries_newer_than_the_installed_version():
    assert ids_since(CHANGELOG, "3.0.17-1~deb12u2") == ("CVE-2025-9230", "CVE-2025-9232", "DSA-6015-1")
    assert ids_since(CHANGELOG, "3.0.16-1") == ("CVE-2025-4575", "CVE-2025-9230", "CVE-2025-9232", "DSA-6015-1")
    asked = []

    def fetch(url: str, timeout: float) -> bytes:
        asked.append(url)
        if "openssl" in url:
            return CHANGELOG.encode()
        raise OSError("timed out")

    logs = Changelogs(fetch)
    assert logs.ids("debian", "openssl", "3.0.17-1~deb12u3", "3.0.17-1~deb12u2") == \
        (("CVE-2025-9230", "CVE-2025-9232", "DSA-6015-1"), "")
    assert asked == [changelog_url("debian", "openssl", "3.0.17-1~deb12u3")]
    assert asked[0] == ("http://metadata.ftp-master.debian.org/changelogs/main/o/openssl/"
                        "openssl_3.0.17-1~deb12u3_changelog")
    ids, why = logs.ids("debian", "glibc", "2.36-9+deb12u13", "2.36-9")
    assert ids == () and why.startswith("ids not read: http://metadata.ftp-master.debian.org not reachable")
    ids, why = logs.ids("debian", "curl", "7.88.1-10+deb12u14", "7.88.1-10")
    assert len(asked) == 2 and "not reachable" in why  # after one failure the server is not asked again


def test_audit_of_a_local_image_reads_its_kept_inventory_once(tmp_path, monkeypatch):
    """`imagebuild audit --image REF`'s run over the one fake engine: the image's dpkg database (real stanzas, libssl3
    replaced) against the real index; the second run reads the kept inventory, not the image."""
    from _fake_engine import FakeEngine

    import imagebuild.engine
    import imagebuild.pipeline.auditing as auditing

    indexes, index = real_indexes()
    stanzas = stanzas_of(packages_text(index, indexes), {"libssl3", "openssl"})
    engine = FakeEngine()
    iid = engine.add_image("img:1", {})
    engine.filesystems[iid] = tar_of({
        "etc/os-release": 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n',
        "var/lib/dpkg/status": status_file(stanzas, {"libssl3": "3.0.11-1~deb12u2"}),
    })
    engine.images_by_id[iid]["Architecture"] = "amd64"
    exports = []
    real_export = engine.export

    def counted(image, **kw):
        exports.append(image)
        return real_export(image, **kw)

    monkeypatch.setattr(engine, "export", counted)
    monkeypatch.setattr(imagebuild.engine, "connect", lambda purpose: engine)
    monkeypatch.setattr(auditing, "SecurityIndexes", lambda tables: indexes)
    monkeypatch.delenv("IMAGEBUILD_OSV_DB", raising=False)
    said: list[str] = []
    run = auditing.audit_images(["img:1"], None, str(tmp_path), None, False, said.append)
    assert run.exit_code == 1  # the default policy: a security fix is a violation
    (result,) = run.results
    assert [(f.package, f.fixed) for f in result.findings] == [("libssl3", index.binaries["libssl3"].version)]
    states = {s.source: s.state for s in result.sources}
    assert states == {"debian-security bookworm-security": CHECKED, "python osv": NOT_CHECKED}
    assert "python osv: NOT CHECKED" in run.text and "VIOLATION" in run.text
    again = auditing.audit_images(["img:1"], None, str(tmp_path), None, False, said.append)
    assert again.json == run.json and len(exports) == 1  # the kept inventory of that image ID
    missing = auditing.audit_images(["nope:1"], None, str(tmp_path), None, False, said.append)
    assert missing.exit_code == 3 and "NOT CHECKED: no image 'nope:1' in the local engine" in missing.text


def test_audit_of_a_matrix_names_each_planned_image_not_in_the_engine(tmp_path, monkeypatch):
    from _fake_engine import FakeEngine

    import imagebuild.engine
    import imagebuild.pipeline.auditing as auditing

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setattr(imagebuild.engine, "connect", lambda purpose: FakeEngine())
    monkeypatch.setattr(auditing, "SecurityIndexes", lambda tables: SecurityIndexes(tables, fetch=_down, cache=tmp_path))
    run = auditing.audit_images([], str(root / "images" / "cpu.yaml"), str(tmp_path), None, False, lambda m: None)
    assert run.exit_code == 3 and len(run.results) == 3  # base, runtime, dev: none built here, none called clean
    assert all(r.sources[0].state == NOT_CHECKED and r.findings == () for r in run.results)
    assert run.text.count("image: NOT CHECKED: not in the record (never built here)") == 3


def _down(url: str, timeout: float) -> bytes:
    raise OSError("offline")
