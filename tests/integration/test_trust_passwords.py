"""Passwords that look like structure (issue 39, item 4), end to end: a signed push through the pipeline's push step
to a real registry (Debian's docker-registry, htpasswd) whose password is `sha256` or `null`, with a cosign key whose
password is the other one, on the real engine and the real cosign 2.5. Before, redaction ran over whole JSON texts:
`null` ended the push in a traceback after the digest was written, `sha256` turned every digest in the record and in
the signed provenance into `***`. Here the push completes, every written digest and image ID is intact, the record
is valid JSON, and cosign verifies the signature and both attestations of each pushed digest.

Tiny FROM-scratch images (a few KB); the module's own registry, keys, record folder and names (any test order).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from imagebuild.models import Plan
from imagebuild.pipeline.loaded import RecordBook
from imagebuild.pipeline.located import Located
from imagebuild.pipeline.pushing import push_step
from imagebuild.pipeline.settings import PushSettings

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import USER, Images, cosign_key_pair, imagebuild, ns, start_registry, stop_registry  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@pytest.fixture(scope="module")
def images(docker_client):
    made = Images(docker_client)
    yield made
    made.cleanup()


@pytest.mark.parametrize("registry_password, key_password", [("sha256", "null"), ("null", "sha256")])
def test_a_structural_password_changes_nothing_that_is_written_or_signed(docker_client, images, cosign, tmp_path,
                                                                         registry_password, key_password):
    info = start_registry(USER, registry_password)
    try:
        key = cosign_key_pair(cosign, tmp_path / "signer", key_password)
        matrix = tmp_path / "passwords.yaml"
        matrix.write_text("# the record's matrix file\n")
        plans = images.chain(f"{info['REGISTRY']}/{ns()}", sizes=(16 << 10, 8 << 10, 4 << 10))[:2]
        ids = {p.tag: docker_client.api.inspect_image(p.tag)["Id"] for p in plans}
        located = [(p, Located(ids[p.tag])) for p in plans]
        book = RecordBook(matrix, str(tmp_path / "state"), None)
        settings = PushSettings(require_tests=False, username=USER, password=registry_password,
                                sign_key=f"{key}.key", sign_password=key_password)
        logs: list[str] = []
        run = push_step(docker_client, Plan(str(matrix), plans), located, book, settings, logs.append)
        assert [(r.push or {}).get("status") for r in run.results] == ["pushed", "pushed"], (run.results, logs)
        digests = {r.tag: r.push["digest"] for r in run.results}
        assert all(DIGEST.fullmatch(d) for d in digests.values()), digests

        # the record: valid JSON, every image ID, inputs hash and pushed digest as they are
        record = json.loads((tmp_path / "state" / "passwords.state.json").read_text())
        text = json.dumps(record)
        assert "***" not in text, [m for m in re.findall(r".{30}\*\*\*.{10}", text)]
        for plan in plans:
            assert plan.inputs_hash in text and ids[plan.tag] in text and digests[plan.tag] in text

        # cosign verifies what was signed, by digest: the signature and both attestations, their subject intact
        for plan in plans:
            ref = f"{plan.repository}@{digests[plan.tag]}"
            res = imagebuild("verify", ref, "--key", f"{key}.pub", "--json", timeout=300,
                             env={"IMAGEBUILD_REGISTRY_USER": USER, "IMAGEBUILD_REGISTRY_PASSWORD": registry_password})
            assert res.returncode == 0, res.stderr
            assert "Traceback" not in res.stderr
            doc = json.loads(res.stdout)
            assert digests[plan.tag] in json.dumps(doc) and "***" not in json.dumps(doc), doc
    finally:
        stop_registry(info)
