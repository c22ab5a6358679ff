"""`imagebuild catalog` over a fake registry reader: rows per tag and alias, labels, sizes, smoke records matched on
the image ID, not-pushed tags, multi-platform indexes, and the Markdown/JSON output."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagebuild.catalog import Header, collect, local_record, ran_on, render_json, render_markdown
from imagebuild.plan import make_plan
from imagebuild.plan.tags import references
from imagebuild.record.store import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
REG = "reg.test:5000/ml"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Manifest:
    """A stored manifest: its digest and the parsed document the registry serves."""

    digest: str
    doc: dict

    @property
    def config_digest(self) -> str:
        return self.doc["config"]["digest"]


class FakeReader:
    """Manifests and config blobs by repository and tag/digest, as a registry serves them; counts every request."""

    def __init__(self):
        self.manifests: dict[tuple[str, str], Manifest] = {}
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.calls: list[tuple[str, str, str]] = []

    def image(self, repository: str, labels: dict, layers: list[int], created: str = "2026-11-30T10:00:00Z") -> str:
        """Store an image manifest + config; return the manifest digest (tags are added with `tag`)."""
        config = {"architecture": "amd64", "os": "linux", "created": created, "config": {"Labels": labels},
                  "rootfs": {"type": "layers", "diff_ids": [f"sha256:{n:064x}" for n in range(len(layers))]}}
        config_bytes = json.dumps(config).encode()
        config_digest = digest_of(config_bytes)
        doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
               "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                          "size": len(config_bytes)},
               "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "size": size,
                           "digest": f"sha256:{size:064x}"} for size in layers]}
        manifest = Manifest(digest_of(json.dumps(doc).encode()), doc)
        self.manifests[(repository, manifest.digest)] = manifest
        self.blobs[(repository, config_digest)] = config_bytes
        return manifest.digest

    def tag(self, repository: str, tag: str, digest: str) -> None:
        self.manifests[(repository, tag)] = self.manifests[(repository, digest)]

    def manifest(self, repository, reference):
        self.calls.append(("manifest", repository, reference))
        m = self.manifests.get((repository, reference))
        return None if m is None else (m.digest, m.doc)

    def blob(self, repository, digest, max_bytes=16 << 20):
        self.calls.append(("blob", repository, digest))
        return self.blobs[(repository, digest)]


@pytest.fixture(scope="module")
def plan():
    return make_plan(ROOT / "images" / "cpu.yaml", None, REG)


def labels_of(image, **over) -> dict:
    return {**image.labels, "org.opencontainers.image.created": "2026-11-30T09:15:00Z", **over}


def push(reader: FakeReader, image, layers, **over) -> str:
    repo = image.repository.split("/", 1)[1]
    digest = reader.image(repo, labels_of(image, **over), layers)
    for ref in references(image):
        reader.tag(repo, ref.rsplit(":", 1)[1], digest)
    return digest


def config_digest(reader: FakeReader, image) -> str:
    repo = image.repository.split("/", 1)[1]
    return reader.manifests[(repo, image.short_tag)].config_digest


def write_record(path: Path, images: dict[str, dict], tests: dict[str, dict]) -> Path:
    """A record file as imagebuild.record writes it (only the fields the catalog reads, plus a few others)."""
    path.write_text(json.dumps({"schema": SCHEMA, "tool_version": "0.1.0", "matrix": "images/cpu.yaml",
                                "inputs": {}, "registry": REG, "images": images, "tests": tests}))
    return path


def run(image_id: str, where: str, at: str, passed: int, failed: int = 0, skipped: int = 0) -> dict:
    return {"image_id": image_id, "suite": "s1", "expect": "e1", "options": {}, "where": where, "at": at,
            "passed": passed, "failed": failed, "skipped": skipped, "seconds": 3.0, "checks": []}


def test_rows_sizes_labels_records_and_not_pushed(plan, tmp_path):
    base, runtime, dev = plan.images
    reader = FakeReader()
    base_digest = push(reader, base, [30_000_000, 1_234])
    rt_digest = push(reader, runtime, [30_000_000, 1_234, 700_000_000])
    base_id, rt_id = config_digest(reader, base), config_digest(reader, runtime)
    record = write_record(tmp_path / "cpu.state.json", images={
        base.id: {"id": base.id, "flavor": "base", "inputs_hash": "h1", "image_id": base_id, "size": 91_000_000,
                  "built_at": "2026-11-30T09:15:00Z"},
        runtime.id: {"id": runtime.id, "flavor": "runtime", "inputs_hash": "h2", "image_id": rt_id,
                     "size": 1_900_000_000},
        # the dev entry is of a build the registry does not hold: never matched by tag or plan id
        dev.id: {"id": dev.id, "flavor": "dev", "inputs_hash": "h3", "image_id": "sha256:" + "d" * 64, "size": 5},
    }, tests={
        "k1": run(base_id, "cpu", "2026-11-30T11:00:00Z", 20, 0, 6),
        "k2": run(rt_id, "cpu", "2026-11-30T11:00:00Z", 30, 0, 21),
        "k3": run(rt_id, "gpu:NVIDIA H100 80GB HBM3", "2026-11-30T12:00:00Z", 40, 1, 0),  # the latest
        "k4": run("sha256:" + "d" * 64, "cpu", "2026-11-30T13:00:00Z", 1),
    })
    entries = collect(plan, lambda host: reader, record)

    assert [e.reference for e in entries] == [r for img in plan.images for r in references(img)]
    by_ref = {e.reference: e for e in entries}
    b = by_ref[base.tag]
    assert (b.pushed, b.digest, b.compressed, b.uncompressed) == (True, base_digest, 30_001_234, 91_000_000)
    assert b.versions["torch"] is None  # the base image holds no torch: its labels do not claim one
    assert b.versions["python"] == "3.11" and b.versions["os"] == "debian12" and b.versions["cuda"] == "cpu"
    assert b.smoke == {"passed": 20, "failed": 0, "skipped": 6, "ran_on": "CPU host",
                       "tested_at": "2026-11-30T11:00:00Z"}
    assert b.created == "2026-11-30T09:15:00Z"
    r = by_ref[runtime.tag]
    assert (r.digest, r.compressed, r.versions["torch"]) == (rt_digest, 730_001_234, "2.13.0")
    assert r.smoke["ran_on"] == "NVIDIA H100 80GB HBM3" and r.smoke["failed"] == 1
    assert [x["ran_on"] for x in r.smoke_runs] == ["CPU host", "NVIDIA H100 80GB HBM3"]
    alias = by_ref[references(runtime)[1]]
    assert alias.alias_of == runtime.tag and alias.digest == rt_digest and not alias.notes
    for ref in references(dev):
        d = by_ref[ref]
        assert not d.pushed and d.digest is None and d.smoke is None and d.versions_from == "plan"
        assert d.versions["torch"] == "2.13.0"  # the plan's, marked as such
    # no layer blob was ever asked for: only manifests and the configs they name
    assert {c[2] for c in reader.calls if c[0] == "blob"} == {config_digest(reader, base),
                                                              config_digest(reader, runtime)}

    header = Header("images/cpu.yaml", REG, tuple(dict.fromkeys(i.repository for i in plan.images)),
                    "2026-12-01T00:00:00Z", str(record))
    md = render_markdown(entries, header)
    assert md.startswith(f"# Images in `{REG}`\n")
    assert "Matrix `images/cpu.yaml` · registry `reg.test:5000/ml` · generated 2026-12-01T00:00:00Z" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| `{runtime.short_tag}` |"))
    assert f"`{rt_digest}`" in row and "730.00 MB" in row and "1.90 GB" in row
    assert "❌ 40/1/0 | NVIDIA H100 80GB HBM3 | 2026-11-30 |" in row
    alias_row = next(line for line in md.splitlines() if line.startswith(f"| ↳ `{alias.tag}` |"))
    assert "| alias |" in alias_row and f"`{rt_digest}`" in alias_row
    dev_row = next(line for line in md.splitlines() if line.startswith(f"| `{dev.short_tag}` |"))
    assert "**not pushed**" in dev_row and "| dev | 2.13.0 |" in dev_row
    assert "3 tags, 3 aliases; 2 not pushed." in md
    doc = json.loads(render_json(entries, header))
    assert doc["registry"] == REG and doc["matrix"] == "images/cpu.yaml"
    assert [e["digest"] for e in doc["entries"]][:2] == [base_digest, base_digest]


def test_no_record_and_stale_alias_and_foreign_image(plan, tmp_path):
    base, runtime, dev = plan.images
    reader = FakeReader()
    push(reader, base, [10])
    push(reader, runtime, [20])
    repo = runtime.repository.split("/", 1)[1]
    old = reader.image(repo, labels_of(runtime, **{"io.imagebuild.torch": "2.12.1"}), [30])
    reader.tag(repo, references(runtime)[1].rsplit(":", 1)[1], old)  # the moving alias still on an older build
    foreign = reader.image(repo, {}, [40])  # someone pushed a non-imagebuild image under the dev tag
    reader.tag(repo, dev.short_tag, foreign)
    entries = collect(plan, lambda host: reader, tmp_path / "absent.json")
    by_ref = {e.reference: e for e in entries}
    alias = by_ref[references(runtime)[1]]
    assert f"points at another image than {runtime.short_tag}" in alias.notes
    assert any("torch 2.12.1 (plan: 2.13.0)" in n for n in alias.notes)
    assert any("no io.imagebuild.* labels" in n for n in by_ref[dev.tag].notes)
    assert by_ref[dev.tag].versions["torch"] is None and by_ref[dev.tag].flavor == "dev"
    assert all(e.uncompressed is None and e.smoke is None and not e.recorded for e in entries)
    header = Header("cpu.yaml", REG, (runtime.repository,), "t", "reports/build-report.json")
    md = render_markdown(entries, header)
    assert f"- `{alias.tag}`: points at another image than {runtime.short_tag}" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| `{base.short_tag}` |"))
    assert "| no record | – |" in row


def test_not_pushed_rows_show_the_planned_labels(plan, tmp_path):
    entries = collect(plan, lambda host: FakeReader(), tmp_path / "none.json")
    base = next(e for e in entries if e.reference == plan.images[0].tag)
    runtime = next(e for e in entries if e.reference == plan.images[1].tag)
    assert not base.pushed and base.versions["torch"] is None and base.versions["python"] == "3.11"
    assert runtime.versions["torch"] == "2.13.0" and runtime.versions_from == "plan"


def test_index_sizes_of_linux_amd64(plan, tmp_path):
    base = plan.images[0]
    reader = FakeReader()
    repo = base.repository.split("/", 1)[1]
    arm = reader.image(repo, labels_of(base), [5])
    amd = reader.image(repo, labels_of(base), [7, 8])
    index_doc = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"digest": arm, "size": 1, "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": amd, "size": 1, "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:" + "a" * 64, "size": 1, "platform": {"os": "unknown", "architecture": "unknown"}},
    ]}
    index = Manifest(digest_of(json.dumps(index_doc).encode()), index_doc)
    reader.manifests[(repo, base.short_tag)] = index
    entries = collect(plan, lambda host: reader, tmp_path / "none.json")
    e = entries[0]
    assert (e.digest, e.platform, e.compressed) == (index.digest, "linux/amd64", 15)
    assert e.notes == ["multi-platform (linux/arm64, linux/amd64); sizes and labels of linux/amd64"]


def test_local_record_matches_on_image_id_only(tmp_path):
    path = write_record(tmp_path / "r.json", images={
        "a-base": {"id": "a-base", "image_id": "sha256:aa", "size": 10, "built_at": "t0"},
        "b-base": {"id": "b-base", "image_id": "sha256:bb"},
    }, tests={"k2": run("sha256:aa", "cpu", "2026-11-30T12:00:00Z", 3),
              "k1": run("sha256:aa", "gpu", "2026-11-30T11:00:00Z", 2),
              "k3": run("sha256:cc", "cpu", "t", 1)})
    rec = local_record("sha256:aa", path)
    assert rec is not None and rec.size == 10 and rec.built_at == "t0"
    assert [r.passed for r in rec.runs] == [2, 3] and rec.latest_run.passed == 3
    only_tests = local_record("sha256:cc", path)
    assert only_tests is not None and only_tests.size is None and len(only_tests.runs) == 1
    assert local_record("sha256:dd", path) is None
    assert local_record("a-base", path) is None  # never by plan id or tag
    assert local_record("sha256:aa", tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert local_record("sha256:aa", tmp_path / "bad.json") is None
    for damaged in ([], {"schema": SCHEMA, "images": []}, {"schema": SCHEMA, "tests": ["x"]}, "[" * 100_000):
        (tmp_path / "bad.json").write_text(damaged if isinstance(damaged, str) else json.dumps(damaged))
        assert local_record("sha256:aa", tmp_path / "bad.json") is None
    other = json.loads(path.read_text())
    other["schema"] = SCHEMA + 1
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert local_record("sha256:aa", tmp_path / "other.json") is None  # another schema is not trusted


def test_ran_on():
    assert ran_on("cpu") == "CPU host"
    assert ran_on("gpu") == "GPU (model not recorded)"
    assert ran_on("gpu:NVIDIA A100-SXM4-80GB,NVIDIA L4") == "NVIDIA A100-SXM4-80GB, NVIDIA L4"
    assert ran_on(None) == "–"


def _cli(*args: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DOCKER_CONFIG": "/nonexistent-docker-config",
           "IMAGEBUILD_STATE_DIR": "/nonexistent-state-dir"}
    env.pop("IMAGEBUILD_REGISTRY_USER", None)
    return subprocess.run([sys.executable, "-m", "imagebuild", "catalog", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def test_unreachable_registry_is_one_line_exit_1():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    r = _cli("--matrix", "images/cpu.yaml", "--registry", f"127.0.0.1:{port}/ml")
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "refused" in errors[0].lower()
    assert r.stderr.strip() == errors[0]  # nothing else printed
    assert r.stdout == ""


def test_plan_without_registry_is_usage_error():
    r = _cli("--matrix", "images/cpu.yaml", "--registry", "")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "--registry" in r.stderr


def test_output_into_a_missing_directory_is_usage_error(tmp_path):
    r = _cli("--matrix", "images/cpu.yaml", "--registry", "127.0.0.1:9/ml", "-o", str(tmp_path / "no" / "c.md"))
    assert r.returncode == 2 and "does not exist" in r.stderr and not (tmp_path / "no").exists()
