"""Build integration tests against a real Docker engine, on a tiny root filesystem made of this host's binaries.

Every test run uses its own names (uuid), and everything it built is removed at the end, so nothing passes on
leftovers. Needs root and an engine (scripts/docker-engine.sh).
"""

from __future__ import annotations

import io
import os
import pickle
import re
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from imagebuild.builder import BuildOptions, build_plan
from imagebuild.builder.progress import Progress
from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL
from imagebuild.models import BaseSource, ImagePlan, OSInfo, Plan, ResolvedVariant, Versions

pytestmark = pytest.mark.integration

RUN_ID = uuid.uuid4().hex[:8]
REPO = f"ibdev-build-{RUN_ID}"
SRC = str(Path(__file__).resolve().parents[2] / "src")
HOST_BINARIES = ("sh", "sleep", "true", "false", "cat", "echo", "ls", "mkdir", "rm")


# -- fixtures ---------------------------------------------------------------------------------------------------
def _libs(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return re.findall(r"(/\S+\.so[.\d]*)", out)


def tiny_rootfs() -> bytes:
    """A few MB: dash + coreutils from this host with their libraries."""
    files: dict[str, str] = {}
    for name in HOST_BINARIES:
        path = subprocess.run(["sh", "-c", f"command -v {name} || true"], capture_output=True, text=True).stdout
        path = f"/bin/{name}" if name in ("true", "false", "echo") else path.strip()
        if not os.path.exists(path):
            path = f"/usr/bin/{name}"
        files[f"bin/{name}"] = os.path.realpath(path)
        for lib in _libs(path):
            files[lib.lstrip("/")] = os.path.realpath(lib)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs = sorted({str(Path(p).parent) for p in files} | {"tmp", "etc", "root"})
        for d in dirs:
            parts = Path(d).parts
            for i in range(1, len(parts) + 1):
                name = str(Path(*parts[:i]))
                if name not in tar.getnames():
                    ti = tarfile.TarInfo(name)
                    ti.type, ti.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
                    tar.addfile(ti)
        for arc, real in sorted(files.items()):
            data = Path(real).read_bytes()
            ti = tarfile.TarInfo(arc)
            ti.size, ti.mode = len(data), 0o755
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _ours(client, root_id: str) -> list[str]:
    """Every image descending from root_id (children first), via ParentId links."""
    imgs = client.api.images(all=True)
    parent = {i["Id"]: i.get("ParentId") for i in imgs}
    mine = []
    for iid in parent:
        p, seen = iid, set()
        while p and p not in seen:
            if p == root_id:
                mine.append(iid)
                break
            seen.add(p)
            p = parent.get(p)
    depth = {}
    for iid in mine:
        d, p = 0, iid
        while p and p != root_id:
            d, p = d + 1, parent.get(p)
        depth[iid] = d
    return sorted((i for i in mine if i != root_id), key=lambda i: -depth[i])


@pytest.fixture(scope="module")
def tiny_os(client):
    ref = f"{REPO}-os:1"
    client.api.import_image(src=io.BytesIO(tiny_rootfs()), repository=f"{REPO}-os", tag="1",
                            changes=["ENV PATH=/bin", 'CMD ["/bin/sh"]'])
    root_id = client.api.inspect_image(ref)["Id"]
    yield ref
    for iid in _ours(client, root_id) + [root_id]:
        try:
            client.api.remove_image(iid, force=True, noprune=False)
        except Exception:
            pass


def variant(key: str, base_ref: str) -> ResolvedVariant:
    osinfo = OSInfo(id="tinyos", family="debian", version="0", codename="tiny", system_python="3.11",
                    installable_pythons=(), mirror="http://invalid", glibc="2.36")
    return ResolvedVariant(key=key, name=REPO, registry="", versions=Versions(torch="0", cuda="cpu", python="3.11",
                                                                             os="tinyos"),
                           cuda_tag="cpu", os=osinfo, base=BaseSource(kind="registry", ref=base_ref),
                           torch_index_url=None, flavors=("base", "runtime", "dev"), tf32=False, gpu_archs=(),
                           arch_list=(), min_driver=None)


def chain(key: str, base_ref: str, runs: dict[str, list[str]] | None = None,
          flavors=("base", "runtime", "dev")) -> list[ImagePlan]:
    """One variant's images; each Dockerfile writes a marker file, `runs` adds RUN lines per flavor."""
    out, parent = [], None
    var = variant(key, base_ref)
    for flavor in flavors:
        lines = ["ARG BASE_IMAGE", "FROM ${BASE_IMAGE}", f"COPY marker.txt /{flavor}.txt"]
        lines += [f"RUN {r}" for r in (runs or {}).get(flavor, [])]
        # volatile args last: declared earlier they would bust the cache of every RUN after them
        lines += ["ARG CREATED", "ARG REVISION", 'LABEL org.opencontainers.image.created="${CREATED}"']
        dockerfile = "\n".join(lines) + "\n"
        h = "sha256:" + uuid.uuid5(uuid.NAMESPACE_URL, f"{RUN_ID}{key}{flavor}{dockerfile}").hex * 2
        img = ImagePlan(id=f"{key}-{flavor}", tag=f"{REPO}:{key}-{flavor}", flavor=flavor,
                        parent=parent.tag if parent else None, variant=var, dockerfile=dockerfile, build_args={},
                        context_files={"marker.txt": f"{key} {flavor} {RUN_ID}\n".encode()},
                        labels={"io.imagebuild.flavor": flavor}, inputs_hash=h)
        out.append(img)
        parent = img
    return out


def opts(tmp_path, **kw) -> BuildOptions:
    return BuildOptions(log_dir=tmp_path / "logs", check_disk=False, **kw)


def run_cli(plan: Plan, tmp_path: Path, *args: str, wait: bool = True):
    """Run `imagebuild build` in a subprocess with `plan` injected (the plan stage is not under test here)."""
    (tmp_path / "plan.pickle").write_bytes(pickle.dumps(plan))
    (tmp_path / "injected.yaml").write_text("name: injected\n")  # the record is named after it; the plan is injected
    # Ctrl-C as in a terminal: a runner started as a script's background job (`cmd &`) ignores SIGINT, its children
    # inherit that and python then installs no KeyboardInterrupt handler (seen: the SIGINT case timed out in CI runs
    # started that way)
    driver = textwrap.dedent(f"""
        import pickle, signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {SRC!r})
        import imagebuild.pipeline.loaded as loaded
        plan = pickle.loads(open({str(tmp_path / 'plan.pickle')!r}, 'rb').read())
        loaded.make_plan = lambda *a, **k: plan
        sys.argv = ["imagebuild", "build", "--matrix", {str(tmp_path / 'injected.yaml')!r}, "--plain",
                    "--log-dir", {str(tmp_path / 'logs')!r}, "--report-dir", {str(tmp_path / 'report')!r}]
        sys.argv += {list(args)!r}
        from imagebuild.cli import main
        main()
    """)
    # its own record folder: another test's injected.state.json (another injected.yaml) is a warning line otherwise
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONUNBUFFERED": "1", "IMAGEBUILD_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    if not wait:
        return proc
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


# -- tests ------------------------------------------------------------------------------------------------------
def test_chain_builds_from_parent_ids_then_all_up_to_date(client, tiny_os, tmp_path):
    images = chain("chain", tiny_os, runs={"runtime": ["echo runtime > /r.txt"], "dev": ["cat /r.txt /base.txt"]})
    t0 = time.monotonic()
    results = build_plan(client, Plan("t", images), opts(tmp_path), Progress())
    first = time.monotonic() - t0
    assert [r.status for r in results] == ["built"] * 3, [r.error for r in results]
    ids = [r.image_id for r in results]
    os_id = client.api.inspect_image(tiny_os)["Id"]
    for i, img in enumerate(images):
        info = client.api.inspect_image(img.tag)
        labels = info["Config"]["Labels"]
        assert info["Id"] == ids[i]
        assert labels[INPUTS_LABEL] == img.inputs_hash
        below = client.api.inspect_image(ids[i - 1] if i else os_id)["RootFS"]["Layers"]
        assert info["RootFS"]["Layers"][:len(below)] == below  # its layers stand on its parent's
        assert labels[BASE_LABEL] == ("" if i else os_id)  # only the root names what it was built on
        history_ids = {h["Id"] for h in client.api.history(img.tag)}
        assert (ids[i - 1] if i else os_id) in history_ids  # FROM the parent's image ID
        assert results[i].size and results[i].size > 0 and results[i].layers
    # the dev image really stands on runtime and base
    out = client.containers.run(images[2].tag, ["cat", "/base.txt", "/runtime.txt", "/r.txt"], network_mode="none",
                                remove=True)
    assert out.decode().split("\n")[:3] == [f"chain base {RUN_ID}", f"chain runtime {RUN_ID}", "runtime"]

    t0 = time.monotonic()
    again = build_plan(client, Plan("t", images), opts(tmp_path), Progress())
    noop = time.monotonic() - t0
    assert [r.status for r in again] == ["up-to-date"] * 3
    assert [r.image_id for r in again] == ids
    assert noop < max(2.0, first / 3)
    print(f"\nchain of 3: first build {first:.1f}s, no-op rebuild {noop:.2f}s")


def test_failing_run_exits_1_with_step_tail_and_log(client, tiny_os, tmp_path):
    images = chain("fail", tiny_os, runs={"runtime": ["echo before-the-failure", "echo some output; false",
                                                      "echo never"]})
    rc, out = run_cli(Plan("t", images), tmp_path)
    assert rc == 1, out
    assert "FAILED " + images[1].tag in out
    assert re.search(r"Step 5/\d+ : RUN echo some output; false: The command .* returned a non-zero code: 1", out)
    assert "returned a non-zero code: 1" in out
    assert "some output" in out  # the tail
    log = tmp_path / "logs" / "fail-runtime.log"
    assert f"full log: {log}" in out and "before-the-failure" in log.read_text()
    summary = out[out.index("build summary"):]
    assert re.search(rf"{re.escape(images[0].tag)}\s+built", summary)
    assert re.search(rf"{re.escape(images[1].tag)}\s+failed", summary)
    assert re.search(rf"{re.escape(images[2].tag)}\s+not-built", summary)


def test_keep_going_builds_independent_images(client, tiny_os, tmp_path):
    bad = chain("kgbad", tiny_os, runs={"runtime": ["false"]})
    good = chain("kggood", tiny_os)
    plan = Plan("t", bad + good)
    results = {r.tag: r for r in build_plan(client, plan, opts(tmp_path, keep_going=True, jobs=2), Progress())}
    assert [results[i.tag].status for i in bad] == ["built", "failed", "not-built"]
    assert [results[i.tag].status for i in good] == ["built", "built", "built"]
    assert "its parent" in results[bad[2].tag].error
    rc, out = run_cli(plan, tmp_path, "--keep-going")
    assert rc == 1 and "4 up-to-date, 1 failed, 1 not-built" in out, out
    # the default backend is auto: one line says which and why (20.10: classic; 26.1 with buildx: BuildKit)
    [line] = [ln for ln in out.splitlines() if ln.startswith("backend auto: ")]
    assert line.endswith(("building with the classic builder", "building with BuildKit")), line
    print(f"\n{line}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_build_leaves_no_containers_and_rerun_uses_cache(client, tiny_os, tmp_path, sig):
    marker = uuid.uuid4().hex
    images = chain(f"int{sig.value}", tiny_os, runs={"base": [f"echo warm-{marker} > /warm",
                                                              f"sleep 120 # {marker}"]}, flavors=("base",))
    proc = run_cli(Plan("t", images), tmp_path, wait=False)
    log = tmp_path / "logs" / f"int{sig.value}-base.log"
    deadline = time.monotonic() + 120
    cid = None
    # the sleep step's container, asked of the engine while it runs (not read from the build log: on a slow VM the
    # log showed the step's container line only after its 120 s were over, and the test then found it gone)
    while time.monotonic() < deadline and proc.poll() is None:
        running = [c["Id"] for c in client.api.containers() if f"sleep 120 # {marker}" in (c.get("Command") or "")]
        if running:
            cid = running[0][:12]
            break
        time.sleep(0.2)
    assert cid, f"the build never reached the sleep step: {proc.poll()} {log.read_text() if log.exists() else ''}"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130, out
    assert "interrupted" in out
    leftovers = [c for c in client.api.containers(all=True)
                 if c["Id"].startswith(cid) or marker in (c.get("Command") or "")]
    assert leftovers == [], leftovers

    # a rerun continues from the engine's cache: the step before the sleep is cached
    rerun = chain(f"int{sig.value}", tiny_os, runs={"base": [f"echo warm-{marker} > /warm", "true"]},
                  flavors=("base",))
    [res] = build_plan(client, Plan("t", rerun), opts(tmp_path), Progress())
    assert res.status == "built"
    text = log.read_text()
    warm = text.index(f"RUN echo warm-{marker}")
    assert "Using cache" in text[warm:text.index("RUN true")]


def test_bad_ca_path_is_a_clear_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC}
    res = subprocess.run([sys.executable, "-m", "imagebuild", "build", "--matrix", "images/cpu.yaml",
                          "--ca-cert", str(tmp_path / "missing-ca.pem")], capture_output=True, text=True, env=env)
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: --ca-cert {tmp_path / 'missing-ca.pem'}: no such file"


def test_no_engine_is_one_line_exit_1(tmp_path):
    # its own record folder: another test's x.state.json (another x.yaml) would add a warning line in some orders
    env = {**os.environ, "PYTHONPATH": SRC, "DOCKER_HOST": f"unix://{tmp_path}/none.sock",
           "IMAGEBUILD_STATE_DIR": str(tmp_path / "state")}
    images = chain("noengine", "unused:1")
    (tmp_path / "plan.pickle").write_bytes(pickle.dumps(Plan("t", images)))
    (tmp_path / "x.yaml").write_text("name: x\n")
    driver = (f"import pickle,sys; sys.path.insert(0,{SRC!r}); import imagebuild.pipeline.loaded as ld; "
              f"p=pickle.load(open({str(tmp_path / 'plan.pickle')!r},'rb')); ld.make_plan=lambda *a,**k: p; "
              f"sys.argv=['imagebuild','build','--matrix',{str(tmp_path / 'x.yaml')!r}]; "
              "from imagebuild.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=env)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"DOCKER_HOST=unix://{tmp_path}/none.sock" in lines[0]
    assert "scripts/docker-engine.sh" in lines[0]


def test_classic_build_leaves_index_credentials_in_no_image(client, tiny_os):
    """The classic builder writes every build argument a RUN used into that step image's history and keeps the
    builder stage's images as its cache: after a build with a credentialed index, no image in the engine (final,
    intermediate, cache) has the credential in its history."""
    import json

    from imagebuild.builder.backend import BuildRequest
    from imagebuild.builder.backends.classic.build import ClassicBackend
    from imagebuild.engine.store import as_store

    token = uuid.uuid4().hex
    secret = f"https://ci:{token}@pypi.invalid/simple"
    dockerfile = ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE} AS pip\nARG PIP_EXTRA_INDEX_URL\n"
                  "RUN echo staged > /staged.txt\nRUN echo twice >> /staged.txt\n\n"
                  "FROM ${BASE_IMAGE}\nCOPY --from=pip /staged.txt /staged.txt\n")
    tag = f"{REPO}-secret:1"
    base_id = client.api.inspect_image(tiny_os)["Id"]
    build = ClassicBackend(as_store(client)).start(BuildRequest(
        tag=tag, dockerfile=dockerfile, build_args={}, labels={}, timeout=120, parents={"BASE_IMAGE": base_id},
        secret_build_args={"PIP_EXTRA_INDEX_URL": secret}))
    lines = [ev.text for ev in build.events() if ev.kind == "line"]
    outcome = build.outcome()
    try:
        assert outcome.image_id, outcome.error
        assert any(ln.startswith("removed ") and "index credentials" in ln for ln in lines), lines[-5:]
        carrying = [img["Id"] for img in client.api.images(all=True)
                    if token in json.dumps(client.api.history(img["Id"]))]
        assert carrying == []
    finally:
        client.api.remove_image(tag, force=True)
