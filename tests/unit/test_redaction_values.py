"""Issue 39, item 4: secrets are masked on VALUES, never on serialised structure.

Every writer that matters — the record (<matrix>.state.json), build-report.json/.md/.junit.xml, history.jsonl and
the SLSA provenance cosign signs — is written twice from the same real documents: once with no secret (the
secret-bearing slots holding `***`), once with the password registered and written raw into those slots (as a
registry, pip or cosign message would echo it). Passwords are drawn from what breaks text-level masking: JSON tokens
(`null`, `true`, `{`, `"`, `:`, `,`), digests and their fragments (`sha256`, hex runs), keys and field names of these
very documents, numbers and dates. Then: every JSON file parses with the same shape, every hash and date is intact,
the XML and Markdown keep their structure, and the password is nowhere outside a hash.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _support import chain, plan_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild import __version__, secrets
from imagebuild.inputs import BuildInputs
from imagebuild.lock.model import BaseLock, Lock, LockedImage, PipPin
from imagebuild.models import ImageResult
from imagebuild.record.store import ImageRecord, Record, shape_problem, value_problem
from imagebuild.report import write_reports
from imagebuild.secrets import mask_tree, redact, register_secret
from imagebuild.sign import make_provenance
from imagebuild.sign.provenance import BUILD_TYPE, BUILDER_ID

REG = "127.0.0.1:5000"
H = {name: "sha256:" + hexes for name, hexes in {
    "base_id": "3fa2b1c4d5e6f708" * 4, "rt_id": "0a1b2c3d4e5f6071" * 4, "base_in": "9e8d7c6b5a4f3e2d" * 4,
    "rt_in": "1122334455667788" * 4, "base_dg": "c0ffee00deadbeef" * 4, "rt_dg": "5eed5eed12345678" * 4,
    "sbom": "abcdef0123456789" * 4, "matrix": "feedface00112233" * 4, "torch": "77aa88bb99cc00dd" * 4}.items()}
TEST_KEY = "0f1e2d3c4b5a6978"  # the record's 16-hex test key
WHEN = "2026-12-02T05:00:00Z"
BASE, RUNTIME, _DEV = chain("2.13.0-cpu-py3.11-debian12", repo=f"{REG}/ml/pytorch")
PLAN = plan_of([BASE, RUNTIME, _DEV])
PLAN.lock_file = "images/cpu.lock"
FIELD_NAMES = ["image_id", "inputs_hash", "status", "digest", "pushes", "images", "schema", "tests", "layers",
               "created_by", "built_at", "error", "buildDefinition", "externalParameters", "resolvedDependencies",
               "uri", "name", "annotations", "testcase", "testsuite", "failure", "system-out", "registry", "inputs"]
VALUES = [BASE.id, RUNTIME.id, BASE.tag, RUNTIME.tag, "built", "pushed", "runtime", "base", "debian12", "2.13.0",
          "pytorch", "127.0.0.1", "5000", "2026", "12-02", "05:00:00", "1234000000", "75.4", "3.11", "imagebuild",
          "failed", "skipped", "test", "push", "build", "up-to-date", "planned", "unchanged", "registry 127"]
# the provenance's own words (its build type, builder, the names of its dependencies): template, not values
FIXED = {BUILD_TYPE, BUILDER_ID, __version__, "matrix", "lock", "parent", "base-image", "image-config", "sbom",
         "application/vnd.cyclonedx+json"}
JSON_TOKENS = ["null", "true", "false", "{", "}", '"', ":", ",", "[", "]", '": "', '{"', '"}', "null,", '": null',
               "\\", "\\n", "  "]


def _fragments() -> st.SearchStrategy[str]:
    """A proper piece (4+ characters) of one of the documents' hashes, algorithm prefix included or not."""
    return st.sampled_from(sorted(H.values())).flatmap(
        lambda h: st.integers(0, len(h) - 4).flatmap(
            lambda i: st.integers(i + 4, min(len(h), i + 63)).map(lambda j: h[i:j])))


PASSWORDS = st.one_of(st.sampled_from(JSON_TOKENS), st.sampled_from(FIELD_NAMES + VALUES),
                      st.sampled_from(["sha256", "sha256:", "256:", TEST_KEY[:8], WHEN[:10], "T05:"]),
                      _fragments(), st.text("0123456789abcdef", min_size=4, max_size=20),
                      st.text("0123456789", min_size=4, max_size=8),
                      st.text(st.sampled_from(list('{}[]":,nultrefas\\ 0')), min_size=1, max_size=8))


@contextlib.contextmanager
def _only_secret(*passwords: str | None) -> Iterator[None]:
    """The process-wide registry of secrets holding `passwords` alone, restored afterwards."""
    saved = set(secrets._SECRETS), set(secrets._SHORT)
    secrets._SECRETS.clear()
    secrets._SHORT.clear()
    for password in passwords:
        register_secret(password)
    try:
        yield
    finally:
        for kept, now in zip(saved, (secrets._SECRETS, secrets._SHORT), strict=True):
            now.clear()
            now.update(kept)


def _slots(pw: str) -> dict[str, str]:
    """The secret-bearing values, each quoting `pw` as a real message would."""
    return {"error": f"push refused: 401 UNAUTHORIZED for ci with password {pw} (https://ci:{pw}@{REG}/v2/)",
            "layer": f"|1 PIP_INDEX_URL=https://ci:{pw}@pypi.corp/simple /bin/sh -c pip install torch",
            "reason": f"registry answered: invalid credentials {pw}", "url": f"https://ci:{pw}@pypi.corp/simple",
            "raw": pw}


def _record(slot: dict[str, str]) -> Record:
    inputs = BuildInputs(pip_index_url=slot["url"], torch_index_url="none").public()
    inputs["pip_extra_index_urls"] = [slot["raw"]]  # a value an older writer left unmasked: the last net catches it
    record = Record(matrix="images/cpu.yaml", matrix_digest=H["matrix"], inputs=inputs, registry=f"{REG}/ml",
                    updated=WHEN)
    record.images[BASE.id] = ImageRecord(
        id=BASE.id, flavor="base", inputs_hash=H["base_in"], image_id=H["base_id"], status="built", built_at=WHEN,
        build_seconds=75.4, size=1_234_000_000, tags={"": [BASE.tag]},
        pushes={BASE.repository: {"status": "pushed", "digest": H["base_dg"], "image_id": H["base_id"], "at": WHEN,
                                  "tags": [BASE.tag]}},
        layers=[{"size": 900_000_000, "created_by": slot["layer"]}])
    record.images[RUNTIME.id] = ImageRecord(
        id=RUNTIME.id, flavor="runtime", inputs_hash=H["rt_in"], parent=BASE.id, image_id=H["rt_id"],
        status="failed", built_at=WHEN, error=slot["error"],
        sbom={"path": "sbom/rt.cdx.json", "sha256": H["sbom"], "image_id": H["rt_id"]})
    record.tests = {TEST_KEY: {"image_id": H["rt_id"], "passed": 3, "failed": 1, "at": WHEN, "reason": slot["reason"]}}
    return record


def _results(slot: dict[str, str]) -> list[ImageResult]:
    vers = {"torch": "2.13.0", "cuda": "cpu", "python": "3.11", "os": "debian12"}
    base = ImageResult(BASE.tag, "base", H["base_in"], vers, status="built", image_id=H["base_id"], size=1_234_000_000,
                       build_seconds=75.4, built_at=WHEN, layers=[{"size": 900_000_000, "created_by": slot["layer"]}],
                       push={"status": "pushed", "digest": H["base_dg"], "tags": [BASE.tag], "seconds": 2.5},
                       sbom={"path": "sbom/b.cdx.json", "sha256": H["sbom"], "components": 7})
    rt = ImageResult(RUNTIME.tag, "runtime", H["rt_in"], vers, parent=BASE.tag, status="failed", image_id=H["rt_id"],
                     error=slot["error"], source=f"registry {REG}",
                     tests={"passed": 3, "failed": 1, "skipped": 0, "checks": [
                         {"name": "cuda", "status": "failed", "reason": slot["reason"]}]},
                     push={"status": "failed", "error": slot["error"], "digest": H["rt_dg"]},
                     diff={"against": H["base_id"], "os": {"added": 1, "removed": 0, "changed": 2},
                           "text": f"+ libfoo (from {slot['url']})"})
    return [base, rt]


def _lock() -> Lock:
    return Lock("cpu.yaml", {
        BASE.id: LockedImage(BASE.id, "debian12", "3.11", "manylinux_2_36_x86_64", (),
                             base=BaseLock("registry", ref="example/os:1", digest=H["base_dg"])),
        RUNTIME.id: LockedImage(RUNTIME.id, "debian12", "3.11", "manylinux_2_36_x86_64", ("torch==2.13.0",),
                                pip=(PipPin("torch", "2.13.0+cpu", H["torch"][7:], "torch-2.13.0+cpu-cp311.whl"),))})


def _write_all(password: str | None, folder: Path) -> dict[str, str]:
    """Every writer's text, with `password` registered and in the slots (None: no secret, `***` in the slots)."""
    slot = _slots(password if password is not None else "***")
    with _only_secret(password):
        record = _record(slot)
        out = {"record": record.to_json()}
        paths = write_reports(_results(slot), folder, PLAN, run={
            "command": "push", "steps": ["build", "test", "push"], "registry": REG, "id": "run-1", "finished": WHEN,
            "note": slot["reason"]})
        out.update({name: Path(p).read_text(encoding="utf-8") for name, p in paths.items()})
        out["provenance"] = json.dumps(make_provenance(PLAN, RUNTIME, record, _lock(), H["rt_dg"],
                                                       sbom_sha256=H["sbom"], lock_sha256=H["matrix"]), indent=1)
    return out


def _shape(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(v) for v in doc]
    return type(doc).__name__


def _strings(doc: Any, key: str | None = None) -> Iterator[str]:
    """Every string value, but the tool's own words (a status, the steps: secrets.VOCABULARY) kept as they are."""
    if isinstance(doc, str):
        if not (key in secrets.VOCABULARY and secrets._WORD.fullmatch(doc)):
            yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield from _strings(v, k)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v, key)


def _outside_hashes(text: str, password: str) -> str:
    """`text` with every hash and date cut out (a token equal to the password stays: that one must be masked)."""
    return secrets._HASH.sub(lambda m: m.group() if m.group() == password else "\0", text)


def _json_docs(files: dict[str, str]) -> dict[str, Any]:
    docs = {name: json.loads(files[name]) for name in ("record", "json", "provenance")}
    docs["history"] = [json.loads(line) for line in files["history"].splitlines()]
    return docs


def _xml_shape(elem: ET.Element) -> tuple[Any, ...]:
    return (elem.tag, tuple(sorted(elem.attrib)), tuple(_xml_shape(c) for c in elem))


def _md_shape(text: str) -> list[int]:
    """The Markdown's lines, each as its count of table separators (an escaped `\\|` inside a cell is no column)."""
    return [len(re.findall(r"(?<!\\)\|", line)) for line in text.splitlines()]


def _check(password: str) -> None:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        plain, masked = _write_all(None, Path(a)), _write_all(password, Path(b))
    plain_docs, masked_docs = _json_docs(plain), _json_docs(masked)  # every JSON file parses
    for name in plain_docs:
        assert _shape(masked_docs[name]) == _shape(plain_docs[name]), name  # same keys, types and list lengths
        for s in set(_strings(masked_docs[name])) - FIXED:  # no password in any value, outside the hashes
            if len(password) < 4:  # a short one: no value IS it (inside text it cannot be masked)
                assert s != password, (name, s)
            else:
                assert password not in _outside_hashes(s, password), (name, s)
    record = json.loads(masked["record"])
    assert shape_problem(record) is None and value_problem(record) is None  # the record still reads back
    assert ET.fromstring(masked["junit"].split("\n", 1)[1]) is not None
    assert _xml_shape(ET.fromstring(masked["junit"].split("\n", 1)[1])) == \
        _xml_shape(ET.fromstring(plain["junit"].split("\n", 1)[1]))
    assert _md_shape(masked["md"]) == _md_shape(plain["md"])
    for name, text in masked.items():
        for h in [*H.values(), TEST_KEY, WHEN]:  # every hash (and its short forms) and date, as often as before
            for form in {h, h[7:], h[:19], h[7:19]} if h.startswith("sha256:") else {h}:
                assert text.count(form) == plain[name].count(form), (name, form)
        # the password no more often than the same text shows with no secret at all (the template's own words)
        assert len(password) < 4 or _outside_hashes(text, password).count(password) <= \
            _outside_hashes(plain[name], password).count(password), (name, password)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(password=PASSWORDS)
def test_a_password_never_changes_structure_hashes_or_dates_and_never_shows(password):
    _check(password)


@pytest.mark.parametrize("password", ["null", "sha256", "true", "2026", "image_id", '": null', "c0ffee00deadbeef",
                                      "sha256:" + "3fa2b1c4d5e6f708" * 2, "5000", BASE.id])
def test_the_passwords_that_broke_the_writers(password):
    """Found with a real registry: `null` ended a push in a traceback (the provenance re-parsed after masking the
    serialised JSON); `sha256` turned every image ID, inputs hash and digest into `***:…`."""
    _check(password)


def test_an_ordinary_password_is_masked_in_every_file():
    pw = "Hunter2-Correct-Horse"
    with tempfile.TemporaryDirectory() as folder:
        files = _write_all(pw, Path(folder))
    for name, text in files.items():
        assert pw not in text, name
    assert "***" in files["record"] and "***" in files["md"] and "***" in files["junit"]
    # the values around it are still there: only the secret went
    assert "push refused: 401 UNAUTHORIZED for ci with password ***" in json.loads(files["json"])["images"][1]["error"]


def test_the_signed_provenance_is_built_from_masked_values_and_not_rewritten(monkeypatch):
    """What cosign attests is byte for byte the predicate built (sign_digest writes json.dumps of it)."""
    from imagebuild.sign import signer
    from imagebuild.sign.cosign import CosignResult, Registry
    from imagebuild.sign.keys import SigningKey

    seen: dict[str, str] = {}

    def fake_cosign(args, **_kw):
        if "--predicate" in args:
            seen[args[args.index("--type") + 1]] = Path(args[args.index("--predicate") + 1]).read_text()
        return CosignResult(0, "", "")

    monkeypatch.setattr(signer, "run_cosign", fake_cosign)
    with _only_secret("null"):
        slot = _slots("null")
        predicate = make_provenance(PLAN, RUNTIME, _record(slot), _lock(), H["rt_dg"], sbom_sha256=H["sbom"])
        assert mask_tree(predicate) == predicate  # nothing left to mask: it was built from masked values
        signer.sign_digest(f"{REG}/ml/pytorch@{H['rt_dg']}", SigningKey("/k/cosign.key", "null"), Registry(REG),
                           sbom={"bomFormat": "CycloneDX", "x": None}, provenance=predicate)
    assert json.loads(seen["slsaprovenance1"]) == predicate
    assert seen["slsaprovenance1"] == json.dumps(predicate, sort_keys=True)
    assert json.loads(seen["cyclonedx"]) == {"bomFormat": "CycloneDX", "x": None}
    ext = predicate["buildDefinition"]["externalParameters"]
    assert ext["inputs"]["pip_index_url"] == "https://ci:***@pypi.corp/simple"
    assert ext["inputs"]["pip_extra_index_urls"] == ["***"]
    assert predicate["runDetails"]["byproducts"][0]["digest"] == {"sha256": H["rt_id"][7:]}


# -- the rule itself, on single values --------------------------------------------------------------------------

@pytest.mark.parametrize(("password", "text", "want"), [
    ("sha256", "pushed r/a@sha256:" + "ab" * 32, "pushed r/a@sha256:" + "ab" * 32),
    ("sha256", "the sha256 of it", "the *** of it"),
    ("abab", "digest sha256:" + "ab" * 32 + " and abab", "digest sha256:" + "ab" * 32 + " and ***"),
    ("2026", f"built {WHEN}, year 2026", f"built {WHEN}, year ***"),
    ("o@sha256", "repo@sha256:" + "cd" * 32, "rep***:" + "cd" * 32),  # reaching into a hash: masked whole
    ("tok-" + "5e" * 16, "bad token tok-" + "5e" * 16, "bad token ***"),  # its hex tail does not stay behind
    ("deadbeefdeadbeef1234", "token deadbeefdeadbeef1234 refused", "token *** refused"),  # a whole hex secret goes
    ("null", '{"a": null}', '{"a": ***}'),  # free text is free text: never give redact a document
])
def test_redact_masks_a_secret_but_never_inside_a_hash_or_date(password, text, want):
    with _only_secret(password):
        assert redact(text) == want


def test_mask_tree_touches_string_values_only():
    doc = {"null": None, "sha256": "sha256:" + "ab" * 32, "n": 2026, "t": True, "s": "null and 2026", "l": ["null"],
           "when": WHEN}
    with _only_secret("null", "2026", "sha256"):
        masked = mask_tree(doc)
    assert masked == {**doc, "s": "*** and ***", "l": ["***"]}
    assert json.loads(json.dumps(masked)) == masked


def test_a_secret_holding_the_mask_itself_settles():
    with _only_secret("a***"):
        assert "a***" not in redact("aa*** and a***a***")


def test_a_short_password_is_masked_only_as_a_whole_value_and_in_a_url():
    with _only_secret(":"):
        assert redact('{"a": "b:c"}') == '{"a": "b:c"}'
        assert redact(":") == "***"
        assert mask_tree({":": [":", "a:b"]}) == {":": ["***", "a:b"]}
        assert redact("https://u:x@h.example/simple") == "https://u:***@h.example/simple"


def test_cosigns_output_is_read_as_written_and_only_its_messages_are_masked(tmp_path, monkeypatch):
    """cosign's stdout is data (the JSON verify parses): masking it as text let the password `null` break every line
    (then no claimed digest was compared) and `sha256` turn the claimed digest into `***:…`."""
    from imagebuild.sign import cosign, verify

    digest = H["rt_dg"]
    claim = json.dumps({"critical": {"identity": {"docker-reference": f"{REG}/ml/pytorch"},
                                     "image": {"docker-manifest-digest": digest}, "type": "cosign container image"},
                        "optional": None})
    fake = tmp_path / "cosign"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' '[{claim}]'\necho \"Error: denied for $COSIGN_PASSWORD\" >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv(cosign.ENV_COSIGN, str(fake))
    for password in ("null", "sha256", "Hunter2-Horse"):
        with _only_secret():
            done = cosign.run_cosign(["verify", f"{REG}/ml/pytorch@{digest}"], password=password)
            assert done.stdout == f"[{claim}]\n"
            assert password not in done.stderr and done.error == "denied for ***"
            claims = verify._json_lines(done.stdout)
            assert [c["critical"]["image"]["docker-manifest-digest"] for c in claims] == [digest]
