"""Push to a real Distribution v2 registry (Debian's docker-registry on 127.0.0.1, htpasswd auth) from the real
Docker engine through skopeo: round trip + pull back (gzip: the classic engine, Docker 20.10, cannot pull zstd;
test_push_zstd.py pulls zstd on the modern engine), a fault-injecting proxy, wrong password, unchanged images, TLS.

Images are tiny `FROM scratch` chains (base -> runtime -> dev) named ibdev-push-*; everything created is removed.
"""

from __future__ import annotations

import io
import os
import secrets
import sys
import tarfile
import time
from pathlib import Path

import pytest

from imagebuild.models import Plan
from imagebuild.oci import Reference, RegistryClient
from imagebuild.plan.tags import references
from imagebuild.push import PushAuthError, Pusher, push_plan

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import PASSWORD, USER, Images, auth, image_plan, ns, stop_registry  # noqa: E402
from _helpers import start_registry as shared_start_registry  # noqa: E402
from faultproxy import Fault, FaultProxy, from_copier  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]


# -- fixtures (docker_client and registry: conftest.py) ----------------------------------------------------------

def start_registry(*extra: str) -> dict[str, str]:
    return shared_start_registry(USER, PASSWORD, *extra)


@pytest.fixture
def images(docker_client):
    imgs = Images(docker_client)
    yield imgs
    imgs.cleanup()


def direct_digest(registry: dict, ref: str, ca: str | None = None) -> str | None:
    client = RegistryClient(auth(registry["REGISTRY"]), ca_file=ca or registry.get("REGISTRY_CA"))
    parsed = Reference.parse(ref)
    return client.manifest_digest(parsed.repository, parsed.tag)


# -- tests -------------------------------------------------------------------------------------------------------

def test_push_chain_then_pull_back_under_new_name(docker_client, registry, images):
    reg = f"{registry['REGISTRY']}/{ns()}"
    plans = images.chain(reg)
    plan = Plan("test.yaml", plans)
    logs: list[str] = []
    t0 = time.monotonic()
    results = push_plan(plan, client=docker_client, auth_for=lambda r: auth(r), require_tests=False,
                        log=logs.append, compression=lambda r: "gzip")
    seconds = time.monotonic() - t0
    assert [r.push["status"] for r in results] == ["pushed"] * 3, [r.push for r in results]
    for res in results:
        assert res.push["digest"].startswith("sha256:")
        for ref in res.push["tags"]:
            assert direct_digest(registry, ref) == res.push["digest"]
    assert results[0].push["tags"][1].endswith(":2.9-cpu-base")
    print(f"\npush of 3 tiny images: {seconds:.1f}s, {sum(r.push['bytes'] for r in results)} bytes sent (compressed)")

    dev = plans[-1]
    original = docker_client.api.inspect_image(dev.tag)
    payload = None
    for ref in references(dev):  # push tags nothing locally: only the plan's own tag is there
        if docker_client.api.images(name=ref, quiet=True):
            docker_client.api.remove_image(ref, force=True)
    repo, tag = dev.tag.rsplit(":", 1)
    out = list(docker_client.api.pull(repo, tag, stream=True, decode=True,
                                      auth_config=auth(registry["REGISTRY"]).sdk_auth_config()))
    assert not [c for c in out if "error" in c], out
    new_name = f"ibdev-push-pulled-{secrets.token_hex(3)}:copy"
    images.tag(f"{repo}:{tag}", new_name)
    pulled = docker_client.api.inspect_image(new_name)
    assert pulled["Id"] == original["Id"]
    container = docker_client.api.create_container(new_name, command=["/none"])
    try:
        stream, _ = docker_client.api.get_archive(container["Id"], "/base.bin")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            payload = tar.extractfile("base.bin").read()
    finally:
        docker_client.api.remove_container(container["Id"], force=True)
    assert len(payload) == 1 << 20


def test_flaky_registry_503_twice_then_reset_mid_upload(docker_client, registry, images):
    host, port = registry["REGISTRY"].split(":")
    faults = [Fault("503"), Fault("503", from_copier), Fault("reset-upload", from_copier)]
    with FaultProxy((host, int(port)), faults) as proxy:
        reg = f"{proxy.address}/{ns()}"
        base = image_plan(reg, "base", None)
        images.build({"base.bin": os.urandom(2 << 20)}, None, base.tag)
        logs: list[str] = []
        # scheme given: no discovery ping, so the first 503 hits imagebuild's own credential check (retried there),
        # the second skopeo's copy by digest, then a reset mid-upload: each a transient failure, retried
        client = RegistryClient(auth(proxy.address), scheme="http", backoff=0.2, log=logs.append)
        pusher = Pusher(docker_client, auth(proxy.address), registry_client=client, retries=4, backoff=0.5,
                        log=logs.append)
        rec = pusher.push_image(base)
        assert rec["status"] == "pushed", (rec, logs, proxy.log)
        assert proxy.pending_faults() == []
        actions = [e.action for e in proxy.log]
        assert actions.count("503") == 2 and actions.count("reset-upload") == 1
        assert not from_copier_entry(proxy.log[0]) and proxy.log[0].action == "503"
        assert any("HTTP 503" in m for m in logs)
        reset = next(e for e in proxy.log if e.action == "reset-upload")
        assert reset.method in ("PATCH", "PUT") and 0 < reset.up < (2 << 20)
        # the digest the registry itself serves (asked directly, not through the proxy) is the one recorded
        direct_ref = base.tag.replace(proxy.address, registry["REGISTRY"])
        assert direct_digest(registry, direct_ref) == rec["digest"]
        print(f"\nflaky push: {rec['attempts']} copy attempt(s), {rec['seconds']}s; log: {logs}")


def test_wrong_password_exits_1_with_registry_message_and_no_retries(docker_client, registry, images, tmp_path,
                                                                     monkeypatch, capsys):
    host, port = registry["REGISTRY"].split(":")
    with FaultProxy((host, int(port))) as proxy:
        reg = f"{proxy.address}/{ns()}"
        base = image_plan(reg, "base", None)
        images.build({"base.bin": os.urandom(4096)}, None, base.tag)
        plan = Plan("test.yaml", [base])
        report = tmp_path / "reports"
        image_id = docker_client.api.inspect_image(base.tag)["Id"]
        from imagebuild.pipeline.located import Located

        (tmp_path / "x.yaml").write_text("name: x\n")
        monkeypatch.setenv("IMAGEBUILD_STATE_DIR", str(tmp_path / "state"))  # its own record, in any test order
        monkeypatch.setattr("imagebuild.pipeline.loaded.resolve_matrix_path", lambda m: tmp_path / "x.yaml")
        monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: plan)
        monkeypatch.setattr("imagebuild.pipeline.flow.locate", lambda client, img, rec: Located(image_id))
        monkeypatch.setattr(sys, "argv", ["imagebuild", "push", "-m", "x.yaml", "-u", USER, "--password-stdin",
                                          "--untested", "--report-dir", str(report)])
        monkeypatch.setattr(sys, "stdin", io.StringIO("definitely-wrong\n"))
        from imagebuild.cli import main

        t0 = time.monotonic()
        with pytest.raises(SystemExit) as exc:
            main()
        assert exc.value.code == 1
        assert time.monotonic() - t0 < 10  # no backoff
        err = capsys.readouterr().err
        assert "unauthorized: authentication required" in err and "definitely-wrong" not in err
        assert not [e for e in proxy.log if from_copier_entry(e)], "nothing was copied"
        assert sum(1 for e in proxy.log if e.path == "/v2/") <= 3


def from_copier_entry(entry) -> bool:
    return not entry.user_agent.lower().startswith("imagebuild/")


def test_unchanged_image_is_skipped_on_second_push(docker_client, registry, images):
    host, port = registry["REGISTRY"].split(":")
    with FaultProxy((host, int(port))) as proxy:
        reg = f"{proxy.address}/{ns()}"
        plans = images.chain(reg, sizes=(256 << 10, 128 << 10, 4096))
        plan = Plan("test.yaml", plans)
        first = push_plan(plan, client=docker_client, auth_for=auth, require_tests=False)
        assert [r.push["status"] for r in first] == ["pushed"] * 3
        proxy.reset_counters()
        second = push_plan(plan, client=docker_client, auth_for=auth, require_tests=False)
        assert [r.push["status"] for r in second] == ["unchanged"] * 3
        assert [r.push["digest"] for r in second] == [r.push["digest"] for r in first]
        assert not [e for e in proxy.log if from_copier_entry(e)]
        assert all(e.method in ("GET", "HEAD") for e in proxy.log)


def test_tls_registry_with_generated_ca(docker_client, images):
    info = start_registry("--tls")
    try:
        assert info["REGISTRY_SCHEME"] == "https" and Path(info["REGISTRY_CA"]).is_file()
        reg = f"{info['REGISTRY']}/{ns()}"
        base = image_plan(reg, "base", None)
        images.build({"base.bin": os.urandom(8192)}, None, base.tag)
        pusher = Pusher(docker_client, auth(info["REGISTRY"]), ca_file=info["REGISTRY_CA"])
        rec = pusher.push_image(base, [base.tag])
        assert rec["status"] == "pushed", rec
        assert direct_digest(info, base.tag, ca=info["REGISTRY_CA"]) == rec["digest"]
        with pytest.raises(PushAuthError):
            Pusher(docker_client, auth(info["REGISTRY"], "nope-nope"), ca_file=info["REGISTRY_CA"]).push_image(base)
    finally:
        stop_registry(info)
