"""Issue 39, items 4 and 7, against a REAL registry (Debian's docker-registry, htpasswd auth) and the REAL cosign 2.5:
`imagebuild verify` tells a malformed signature or attestation from another key's, a 401 from an unsigned image, and
a registry password that is a JSON token or a digest's algorithm (`null`, `sha256`) changes nothing it reads or prints.

No engine: each test pushes its own tiny OCI image (one 3-byte layer, content unique to the test) with skopeo, signs
and attests it with cosign by hand, then runs the CLI. Own registry, own keys, own names: any order, seconds.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import cosign_key_pair, imagebuild, start_registry, stop_registry  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
USER = "trust"
KEY_PASSWORD = "kp-" + secrets.token_hex(8)
SIG_ANNOTATION = "dev.cosignproject.cosign/signature"


@pytest.fixture(scope="module")
def cosign(cosign):
    """The session's cosign (conftest.py), with the registry and skopeo this module pushes with."""
    if not (shutil.which("docker-registry") and shutil.which("skopeo")):
        pytest.skip("docker-registry and skopeo are needed (scripts/system-deps.sh)")
    return cosign


@pytest.fixture(scope="module")
def keys(cosign, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trust-keys")
    for name in ("good", "other"):
        cosign_key_pair(cosign, folder / name, KEY_PASSWORD)
    return folder


class Reg:
    """One registry whose password is `password`, and what pushes, signs and tampers with images there."""

    def __init__(self, password: str, cosign: str, keys: Path, work: Path):
        self.password, self.cosign, self.keys, self.work = password, cosign, keys, work
        self.info = start_registry(USER, password)
        self.address = self.info["REGISTRY"]
        config = work / "docker-config"
        config.mkdir()
        auth = base64.b64encode(f"{USER}:{password}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {self.address: {"auth": auth}}}))
        self.docker_config = str(config)

    def env(self, creds: bool = True) -> dict[str, str]:
        out = {"IMAGEBUILD_REGISTRY_USER": USER, "IMAGEBUILD_REGISTRY_PASSWORD": self.password} if creds else \
            {"IMAGEBUILD_REGISTRY_USER": "", "IMAGEBUILD_REGISTRY_PASSWORD": ""}
        return {**out, "DOCKER_CONFIG": self.docker_config if creds else str(self.work / "no-config")}

    def push(self, name: str) -> str:
        """A tiny image of its own content pushed as REG/trust/NAME:1; its REPO@DIGEST."""
        layout = self.work / f"oci-{name}"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)

        def blob(data: bytes) -> tuple[str, int]:
            digest = hashlib.sha256(data).hexdigest()
            (blobs / digest).write_bytes(data)
            return "sha256:" + digest, len(data)

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))
        layer = blob(buf.getvalue())
        config = blob(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                                  "rootfs": {"type": "layers", "diff_ids": [layer[0]]}}).encode())
        manifest = blob(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                               "digest": config[0], "size": config[1]},
                                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                                "digest": layer[0], "size": layer[1]}]}).encode())
        (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest[0], "size": manifest[1],
            "annotations": {"org.opencontainers.image.ref.name": "1"}}]}))
        digest_file = self.work / f"digest-{name}"
        done = subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", "--dest-creds", f"{USER}:{self.password}",
                               "--digestfile", str(digest_file), f"oci:{layout}:1",
                               f"docker://{self.address}/trust/{name}:1"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return f"{self.address}/trust/{name}@{digest_file.read_text().strip()}"  # as served (skopeo may recompress)

    def cosign_run(self, *args: str) -> None:
        done = subprocess.run([self.cosign, *args], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL,
                              env={**os.environ, "COSIGN_PASSWORD": KEY_PASSWORD, "DOCKER_CONFIG": self.docker_config})
        assert done.returncode == 0, done.stderr

    def sign_and_attest(self, ref: str, key: str = "good") -> None:
        flags = ["--key", str(self.keys / f"{key}.key"), "--tlog-upload=false", "--yes", "--allow-http-registry"]
        self.cosign_run("sign", *flags, ref)
        for kind, predicate in (("cyclonedx", {"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}),
                                ("slsaprovenance1", {"buildDefinition": {"buildType": "x", "externalParameters": {
                                    "matrix": {"path": "m.yaml", "digest": {}}}},
                                    "runDetails": {"builder": {"id": "https://imagebuild.dev/builder"}}})):
            path = self.work / f"{kind}.json"
            path.write_text(json.dumps(predicate))
            self.cosign_run("attest", *flags, "--type", kind, "--predicate", str(path), ref)

    def _api(self, method: str, path: str, data: bytes | None = None, media: str = "") -> bytes:
        import urllib.request

        req = urllib.request.Request(f"http://{self.address}{path}", data=data, method=method, headers={
            "Authorization": "Basic " + base64.b64encode(f"{USER}:{self.password}".encode()).decode(),
            "Accept": "application/vnd.oci.image.manifest.v1+json", **({"Content-Type": media} if media else {})})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read()

    def tamper(self, ref: str, suffix: str, change) -> None:
        """Rewrite the `.sig` or `.att` manifest of REF@DIGEST (its first layer's annotations or blob)."""
        repo, digest = ref.split("/", 1)[1].split("@")
        tag = f"/v2/{repo}/manifests/{digest.replace(':', '-')}.{suffix}"
        manifest = json.loads(self._api("GET", tag))
        layer = manifest["layers"][0]
        body = self._api("GET", f"/v2/{repo}/blobs/{layer['digest']}")
        new_body = change(layer["annotations"], body)
        if new_body != body:
            location = self._upload(repo)
            new_digest = "sha256:" + hashlib.sha256(new_body).hexdigest()
            self._api("PUT", f"{location}{'&' if '?' in location else '?'}digest={new_digest}", new_body,
                      "application/octet-stream")
            layer["digest"], layer["size"] = new_digest, len(new_body)
        self._api("PUT", tag, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")

    def _upload(self, repo: str) -> str:
        import urllib.request

        req = urllib.request.Request(f"http://{self.address}/v2/{repo}/blobs/uploads/", data=b"", method="POST",
                                     headers={"Authorization": "Basic " + base64.b64encode(
                                         f"{USER}:{self.password}".encode()).decode()})
        with urllib.request.urlopen(req, timeout=30) as resp:
            location = resp.headers["Location"]
        return location.split(self.address, 1)[-1]


@pytest.fixture(scope="module")
def reg(cosign, keys, tmp_path_factory):
    made = Reg("rp-" + secrets.token_hex(8), cosign, keys, tmp_path_factory.mktemp("trust-reg"))
    yield made
    stop_registry(made.info)


def _verify(reg: Reg, ref: str, key: str = "good", creds: bool = True, *extra: str):
    return imagebuild("verify", ref, "--key", str(reg.keys / f"{key}.pub"), *extra, env=reg.env(creds), timeout=120)


def _error_line(res) -> str:
    assert res.returncode != 0, res.stdout
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_signed_verifies_another_key_is_another_key(reg):
    ref = reg.push("honest")
    reg.sign_and_attest(ref)
    res = _verify(reg, ref)
    assert res.returncode == 0, res.stderr
    assert f"verified {ref}" in res.stdout
    line = _error_line(_verify(reg, ref, key="other"))
    assert "signed by another key" in line and "malformed" not in line


@pytest.mark.parametrize("how", ["not-base64", "not-der", "empty"])
def test_a_malformed_signature_is_called_malformed(reg, how):
    ref = reg.push(f"badsig-{how}")
    reg.sign_and_attest(ref)
    bad = {"not-base64": "not*base64!", "not-der": base64.b64encode(b"garbage-bytes-here").decode(), "empty": ""}[how]

    def change(annotations, body):
        annotations[SIG_ANNOTATION] = bad
        return body

    reg.tamper(ref, "sig", change)
    line = _error_line(_verify(reg, ref))
    assert "malformed" in line and "another key" not in line, line


def test_a_malformed_attestation_is_called_malformed_and_another_keys_is_another_key(reg):
    ref = reg.push("badatt")
    reg.sign_and_attest(ref)

    def garbage_signature(annotations, body):
        envelope = json.loads(body)
        envelope["signatures"][0]["sig"] = base64.b64encode(b"garbage-bytes-here").decode()
        return json.dumps(envelope).encode()

    reg.tamper(ref, "att", garbage_signature)
    line = _error_line(_verify(reg, ref))
    assert "attestation" in line and "malformed" in line and "another key" not in line, line

    other = reg.push("otheratt")  # signed by us, attested by someone else: well-formed envelopes of another key
    reg.sign_and_attest(other, key="other")
    reg.cosign_run("sign", "--key", str(reg.keys / "good.key"), "--tlog-upload=false", "--yes",
                   "--allow-http-registry", other)
    line = _error_line(_verify(reg, other))
    assert "attestation" in line and "signed by another key" in line and "malformed" not in line, line


def test_a_401_is_an_authentication_failure_naming_only_what_verify_takes(reg):
    ref = reg.push("private")
    reg.sign_and_attest(ref)
    for target in (ref, ref.split("@")[0] + ":1"):  # by digest (cosign meets the 401) and by tag (our client does)
        line = _error_line(_verify(reg, target, creds=False))
        assert "authentication failed" in line, line
        for wrong in ("unsigned", "another key", "does not answer", "missing", "--username", "--password-stdin"):
            assert wrong not in line, line
    assert _verify(reg, ref).returncode == 0


@pytest.mark.parametrize("password", ["null", "sha256"])
def test_a_registry_password_that_is_a_json_token_or_an_algorithm_changes_nothing_verify_reads(
        cosign, keys, tmp_path, password):
    """Found with a real registry: cosign's JSON went through the text mask, so the password `null` broke every
    claim line and `sha256` turned the claimed digest into `***:…`."""
    reg = Reg(password, cosign, keys, tmp_path)
    try:
        ref = reg.push(f"pw-{password}")
        reg.sign_and_attest(ref)
        res = _verify(reg, ref, "good", True, "--json")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        digest = ref.split("@")[1]
        assert doc["digest"] == digest and doc["verified"] == ref
        assert doc["attestations"]["cyclonedx"]["subject"][0]["digest"]["sha256"] == digest.removeprefix("sha256:")
        assert "***" not in res.stdout
        line = _error_line(_verify(reg, ref, "other"))
        assert "signed by another key" in line and digest in line
    finally:
        stop_registry(reg.info)
