"""Issue 39, item 7: messages that tell the truth.

- cosign's refusals, in the words of cosign 2.5 as read from a real registry (sign/refusals.py): a malformed
  signature is called malformed, never "another key"; a signature over another digest is not "another key" either;
  a 401 is an authentication failure, not "unsigned", "missing" or "does not answer";
- an attestation cosign refuses with the same words for another key and for a malformed envelope is told apart by
  reading the envelopes;
- hints name only options the command that prints them has: a walk over every command's own strings, a walk over
  every string of the package (each `--option` is one of imagebuild's or a named tool's), and the shared hints
  (registry credentials, CA file, key options) asked under each command.
"""

from __future__ import annotations

import ast
import base64
import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from imagebuild.cli import cli
from imagebuild.errors import UsageError
from imagebuild.hints import ca_hint, credentials_hint, has_option
from imagebuild.oci import RegistryAuth, RegistryError
from imagebuild.oci.registry import RegistryAuthError
from imagebuild.sign import refusals
from imagebuild.sign.refusals import envelope_problem, signature_problem
from imagebuild.sign.verify import VerifyError, _attestation_problem, resolve_digest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "imagebuild"
DIGEST = "sha256:206f83e52b1e95d5a0dbf60d39ac6505f0ba8db97d0e21841ee2f94d760d4088"
# a real cosign 2.5 signature (ECDSA P-256, DER) and the public key file header of an EC key
REAL_SIG = "MEYCIQCxdGZgryOwO0fiRSdO7K7ggbuou1K1PpNlOU1URunH+wIhAIj0JOtgPTcE+YLfV8qzZ5RQzQN5yAVMVy352bobW40S"
EC_PUB = ("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE" + "A" * 84 + "==\n-----END PUBLIC KEY-----\n")


# -- cosign's refusals -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("error", "want"), [
    ("no signatures found", "unsigned"),
    ("no matching signatures: invalid signature when validating ASN.1 encoded signature", "signed by another key"),
    ("no matching signatures: illegal base64 data at input byte 3", "its signature is malformed"),
    ("no matching signatures: invalid signature when validating IEEE_P1363 encoded signature",
     "its signature is malformed"),
    ("no matching signatures: ecdsa: Invalid IEEE_P1363 encoded bytes", "its signature is malformed"),
    ("no matching signatures: invalid character 'o' in literal null (expecting 'u')", "signed payload is malformed"),
    ("no matching signatures: invalid or missing digest in claim: sha256:" + "0" * 64, "signed for another digest"),
    (f"GET http://127.0.0.1:5000/v2/t/x/manifests/{DIGEST.replace(':', '-')}.sig: UNAUTHORIZED: authentication "
     "required; [map[Action:pull Class: Name:t/x Type:repository]]", "authentication failed"),
    ("GET https://r.example/v2/t/x/manifests/sha256-ab.sig: DENIED: requested access to the resource is denied",
     "denied access"),
])
def test_a_signature_refusal_is_told_as_what_it_is(error, want):
    said = signature_problem(error)
    assert want in said
    if want != "signed by another key":  # the honest "another key" stays; nothing else is called that
        assert "another key" not in said


@pytest.mark.parametrize(("error", "want"), [
    ("no matching attestations: ", "missing"),
    ("none of the attestations matched the predicate type: cyclonedx", "missing"),
    ("no matching attestations: no matching subject digest found", "made for another digest"),
    ("no matching attestations: accepted signatures do not match threshold, Found: 0, Expected 1",
     "signed by another key"),
    ("no matching attestations: unable to base64 decode payload (is payload in the right format?)", "malformed"),
    (f"GET http://127.0.0.1:5000/v2/t/x/manifests/{DIGEST.replace(':', '-')}.att: UNAUTHORIZED: authentication "
     "required", "authentication failed"),
])
def test_an_attestation_refusal_is_told_as_what_it_is(error, want):
    assert want in _attestation_problem(error)
    if want != "signed by another key":
        assert "another key" not in _attestation_problem(error)
    if "UNAUTHORIZED" in error:
        assert _attestation_problem(error) != "missing"


class _Client:
    """A registry holding one `.att` manifest whose layers are the given envelopes."""

    def __init__(self, envelopes: list[bytes] | None, fail: RegistryError | None = None):
        self.envelopes, self.fail = envelopes, fail

    def manifest(self, repository, reference):
        assert reference == DIGEST.replace(":", "-") + ".att"
        if self.fail:
            raise self.fail
        if self.envelopes is None:
            return None
        return "sha256:m", {"layers": [{"digest": f"sha256:{i}"} for i in range(len(self.envelopes))]}

    def blob(self, repository, digest, max_bytes=0):
        return self.envelopes[int(digest.split(":")[1])]


def _envelope(sig: str, payload: str = base64.b64encode(b'{"_type":"x"}').decode()) -> bytes:
    return json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": payload,
                       "signatures": [{"keyid": "", "sig": sig}]}).encode()


@pytest.mark.parametrize(("envelopes", "want"), [
    ([_envelope(REAL_SIG)], None),  # well formed: another key's, cosign's words stand
    ([_envelope(REAL_SIG), _envelope("not*base64!")], "malformed (a signature is not base64)"),
    ([_envelope(base64.b64encode(b"garbage-bytes-here").decode())], "malformed (a signature is not a DER"),
    ([_envelope(base64.b64encode(bytes(64)).decode())], "malformed (a signature is not a DER"),  # P1363, not cosign's
    ([_envelope(REAL_SIG, payload="not*base64")], "malformed (a DSSE payload is not base64)"),
    ([b"{not json"], "malformed (a layer is not JSON"),
    ([json.dumps({"payload": "e30=", "signatures": []}).encode()], "malformed (a DSSE envelope holds no signature)"),
    (None, None),
])
def test_attestation_envelopes_are_read_to_tell_malformed_from_another_key(tmp_path, envelopes, want):
    pub = tmp_path / "cosign.pub"
    pub.write_text(EC_PUB)
    got = envelope_problem(_Client(envelopes), "t/x", DIGEST, str(pub))
    assert got == want if want is None else (got or "").startswith(want)


def test_a_non_der_signature_is_no_fault_for_a_key_that_is_not_ecdsa(tmp_path):
    """An RSA or KMS key signs in other encodings: only base64 and the envelope's shape are asked of them."""
    pub = tmp_path / "rsa.pub"
    pub.write_text("-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----\n")
    raw = _envelope(base64.b64encode(bytes(256)).decode())
    assert envelope_problem(_Client([raw]), "t/x", DIGEST, str(pub)) is None
    assert envelope_problem(_Client([raw]), "t/x", DIGEST, "awskms:///alias/k") is None
    assert envelope_problem(_Client([_envelope("x!")]), "t/x", DIGEST, "awskms:///alias/k").startswith("malformed")


def test_an_unreadable_attestation_leaves_cosigns_words(tmp_path):
    fail = RegistryAuthError("r: unauthorized", status=401)
    assert envelope_problem(_Client([], fail=fail), "t/x", DIGEST, str(tmp_path / "k.pub")) is None


def test_der_check_on_real_and_broken_signatures():
    assert refusals._der_ecdsa(base64.b64decode(REAL_SIG))
    raw = base64.b64decode(REAL_SIG)
    for broken in (raw[:-5], raw + b"\0", b"\x30\x02\x02\x00", bytes(64), b"", raw.replace(b"\x02", b"\x04", 1)):
        assert not refusals._der_ecdsa(broken), broken


# -- a registry's refusal --------------------------------------------------------------------------------------

class _Registry:
    registry = "127.0.0.1:5000"

    def __init__(self, answer):
        self.answer = answer

    def manifest_digest(self, repository, tag):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(("answer", "want", "never"), [
    (RegistryAuthError("127.0.0.1:5000: unauthorized: authentication required (HTTP 401, anonymous)", status=401),
     "authentication failed", "does not answer"),
    (RegistryAuthError("127.0.0.1:5000: denied: access (HTTP 403, user ci)", status=403), "access denied",
     "does not answer"),
    (RegistryError("127.0.0.1:5000: GET /v2/: connection refused", transient=True), "does not answer",
     "authentication"),
    (None, "no such tag", "authentication"),
])
def test_a_401_is_an_authentication_failure_not_a_registry_that_does_not_answer(answer, want, never):
    from imagebuild.oci import Reference

    with pytest.raises(VerifyError) as caught:
        resolve_digest(Reference.parse("127.0.0.1:5000/t/x:1"), _Registry(answer))  # type: ignore[arg-type]
    assert want in str(caught.value) and never not in str(caught.value)


# -- hints name only options the command has -------------------------------------------------------------------

_CTX = click.Context(cli)
COMMANDS = {name: cli.get_command(_CTX, name) for name in cli.list_commands(_CTX)}
OPTIONS = {name: {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} | {"--help"}
           for name, cmd in COMMANDS.items()}
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
# other tools' options the package names in its strings (commands it runs, lines it prints for pip, docker, srun,
# cosign, skopeo, mmdebstrap, gpg, numactl, nvidia-smi, pytest): never an imagebuild hint
EXTERNAL = {
    "pip": {"--constraint", "--disable-pip-version-check", "--extra-index-url", "--find-links", "--hash",
            "--ignore-installed", "--implementation", "--no-deps", "--no-input", "--only-binary", "--python-version",
            "--report", "--require-hashes", "--target", "--use-feature"},
    "docker/buildx": {"--allow-root", "--append", "--bootstrap", "--build-arg", "--build-context", "--cache-from",
                      "--cache-to", "--cpuset-cpus", "--cpuset-mems", "--file", "--iidfile", "--input", "--ipc",
                      "--label", "--metadata-file", "--link", "--network", "--progress", "--provenance", "--rm", "--secret", "--set",
                      "--tag", "--ulimit", "--user", "--version"},
    "slurm/pyxis/torchrun/numactl": {"--container-image", "--container-mounts", "--container-workdir", "--cpu-bind",
                                     "--cpunodebind", "--cpus-per-task", "--exclusive", "--export", "--mem-bind",
                                     "--membind", "--nproc-per-node", "--ntasks-per-node", "--config"},
    "cosign": {"--allow-http-registry", "--insecure-ignore-tlog", "--predicate", "--registry-cacert", "--replace",
               "--tlog-upload", "--type", "--yes", "--cert"},
    "skopeo": {"--dest-authfile", "--dest-cert-dir", "--dest-decompress", "--dest-tls-verify", "--preserve-digests",
               "--retry-times", "--src-authfile", "--src-tls-verify"},
    "mmdebstrap/gpg/gpgv/dpkg/tar": {"--aptopt", "--arch", "--architectures", "--batch", "--components",
                                "--customize-hook", "--dpkgopt", "--homedir", "--import", "--include", "--keyring",
                                "--no-autostart", "--numeric-owner", "--print-architecture", "--show-keys",
                                "--variant", "--with-colons", "--xattrs", "--compare-versions", "--status-fd"},
    "devcontainer CLI/setpriv/code-server": {"--workspace-folder", "--reuid", "--regid", "--init-groups", "--auth",
                                             "--bind-addr", "--disable-telemetry", "--disable-update-check"},
    "others": {"--query-gpu", "--junitxml", "--no-browser", "--no-fail", "--bridge", "--fresh", "--from", "--lock",
               "--option", "--fmt"},
}
_EXTERNAL_ALL = set().union(*EXTERNAL.values())
# a tool named earlier on the same line of the same `…` span: its option, not ours (`pip install --dry-run`)
_TOOL_BEFORE = re.compile(r"\b(?:pip|docker|buildx|srun|sbatch|torchrun|cosign|skopeo|mmdebstrap|numactl|nvidia-smi|"
                          r"enroot)\b[^`\n]*$")


def _strings(path: Path) -> list[tuple[int, str]]:
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_every_option_a_command_names_is_its_own_or_another_commands_named_with_it():
    """A command's own strings (its messages, help and examples) name its options; an option of another command
    only after that command's name (`imagebuild export ... --force`, `build --locked`); a tool's option after the
    tool. Caught before: `verify --key bad.pub` said `--verify-key bad.pub: …`."""
    wrong = []
    for name, cmd in COMMANDS.items():
        module = Path(__import__(cmd.callback.__module__, fromlist=["x"]).__file__)
        for line, text in _strings(module):
            for m in _OPTION.finditer(text):
                opt = m.group()
                if opt in OPTIONS[name] or opt in _EXTERNAL_ALL:
                    continue
                before = text[:m.start()]
                named = [c for c in COMMANDS if re.search(rf"\b{re.escape(c)}\b", before) and opt in OPTIONS[c]]
                if not named and not _TOOL_BEFORE.search(before):
                    wrong.append(f"{module.name}:{line}: `{name}` names {opt}: {text[max(0, m.start() - 60):m.end()]!r}")
    assert wrong == []


def test_every_option_the_package_names_is_imagebuilds_or_a_named_tools():
    """A removed or misspelt option in any message of any module is caught here (the in-image probe and suite
    excepted: they name their own pytest options)."""
    known = set().union(*OPTIONS.values()) | _EXTERNAL_ALL
    wrong = [f"{path.relative_to(PACKAGE)}:{line}: {opt}"
             for path in sorted(PACKAGE.rglob("*.py")) if not {"probe", "smoke"} & set(path.parts)
             for line, text in _strings(path) for opt in _OPTION.findall(text) if opt not in known]
    assert wrong == []


def _under(command: str):
    return click.Context(COMMANDS[command], info_name=command)


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_shared_hints_name_an_option_only_under_a_command_that_has_it(command):
    with _under(command):
        creds, ca = credentials_hint(), ca_hint("r.example:5000")
        assert ("--username" in creds) == ("--username" in OPTIONS[command] and "--password-stdin" in OPTIONS[command])
        assert ("--ca-file" in ca) == ("--ca-file" in OPTIONS[command])
        assert "docker login" in creds and "/etc/docker/certs.d/r.example:5000/ca.crt" in ca
        for opt in _OPTION.findall(creds + ca):
            assert opt in OPTIONS[command], (command, opt)


def test_outside_a_command_every_alternative_is_named():
    assert has_option("--anything")
    assert "--username/--password-stdin" in credentials_hint() and "--ca-file" in ca_hint("r")


def test_a_401_without_credentials_names_only_what_the_command_takes():
    """`verify` has no --username: the anonymous 401 names docker login and the variables; `push` names all."""
    from imagebuild.oci.registry import RegistryClient

    client = RegistryClient(RegistryAuth("r.example"))
    first = type("R", (), {"status": 401, "body": b'{"errors":[{"code":"UNAUTHORIZED"}]}', "headers": {}})()
    for command, has in (("verify", False), ("push", True), ("run", False)):
        with _under(command), pytest.raises(RegistryAuthError) as caught:
            client._authorize('Basic realm="r"', "repository:t/x:pull", first)  # type: ignore[arg-type]
        assert ("--username" in str(caught.value)) == has, (command, str(caught.value))
        assert "docker login" in str(caught.value)


@pytest.mark.parametrize(("args", "option"), [
    (["verify", "127.0.0.1:5000/t/x:1", "--key", "{private}"], "--key"),
    (["verify", "127.0.0.1:5000/t/x:1", "--key", "{junk}"], "--key"),
    (["verify", "127.0.0.1:5000/t/x:1", "--key", "{missing}"], "--key"),
    (["verify", "127.0.0.1:5000/t/x:1"], "--key"),
])
def test_a_key_refusal_names_the_option_the_command_has(tmp_path, monkeypatch, args, option):
    monkeypatch.delenv("IMAGEBUILD_VERIFY_KEY", raising=False)
    (tmp_path / "c.key").write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJr\n"
                                    "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    (tmp_path / "c.key").chmod(0o600)
    (tmp_path / "junk.pub").write_text("hello\n")
    files = {"{private}": str(tmp_path / "c.key"), "{junk}": str(tmp_path / "junk.pub"),
             "{missing}": str(tmp_path / "nope.pub")}
    res = CliRunner().invoke(cli, [files.get(a, a) for a in args])
    assert isinstance(res.exception, UsageError), (res.output, res.exception)  # main() prints it: one error: line
    named = set(_OPTION.findall(str(res.exception) + res.output))
    assert option in named and named <= OPTIONS[args[0]], (named, res.output, res.exception)


def test_only_envelopes_of_the_type_asked_about_are_judged(tmp_path):
    """cosign drops an envelope it cannot verify and says the type is missing: a broken SBOM attestation is called
    malformed, a broken provenance beside a missing SBOM does not make the SBOM 'malformed'."""
    pub = tmp_path / "cosign.pub"
    pub.write_text(EC_PUB)

    def typed(kind: str, sig: str) -> bytes:
        return _envelope(sig, base64.b64encode(json.dumps({"predicateType": kind}).encode()).decode())

    bom, prov = "https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1"
    broken_bom = _Client([typed(bom, "not*base64!"), typed(prov, REAL_SIG)])
    assert envelope_problem(broken_bom, "t/x", DIGEST, str(pub), bom).startswith("malformed")
    assert envelope_problem(broken_bom, "t/x", DIGEST, str(pub), prov) is None
    assert envelope_problem(_Client([_envelope(REAL_SIG, base64.b64encode(b"{x").decode())]), "t/x", DIGEST,
                            str(pub), bom).startswith("malformed (a DSSE payload is not an in-toto statement")
