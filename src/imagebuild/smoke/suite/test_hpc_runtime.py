"""The image as enroot/pyxis and Apptainer start it: an unknown UID/GID, no USER, a read-only root, an empty HOME
from outside and a hostile host environment (probe/hpcruntime.py). The runner starts that container
(imagebuild.smoke.hpcrun) and names it with --hpc-host; by hand:

    docker run -d --name x-hpc --read-only --tmpfs /tmp --tmpfs /home/researcher:uid=23456,gid=23456 \\
        --user 23456:23456 -e HOME=/home/researcher -e USER=researcher -e PYTHONPATH=/nope \\
        -e LD_LIBRARY_PATH=/nope -e CUDA_HOME=/nope -e PIP_INDEX_URL=http://pip.invalid IMAGE sleep infinity
    pytest --hosts=docker://x src/imagebuild/smoke/suite -k hpc --hpc-host x-hpc
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.section("hpc")

HPC_UNWIRED = "no enroot/Apptainer-mode container to test in (the runner starts one; by hand see this file's doc)"


@pytest.fixture(scope="module")
def hpc_doc(request: pytest.FixtureRequest, smoke: Any) -> dict[str, Any]:
    """The hpc probe's JSON from the --hpc-host container (the suite's probe of the table's `hpc` place)."""
    if not (request.config.getoption("hpc_host") or request.config.getoption("hpc_error")):
        pytest.skip(HPC_UNWIRED)
    res = smoke.extra_probe("hpc")
    if res["error"]:
        pytest.fail(f"hpc probe ({res['where'] or 'not run'}): {res['error']}", pytrace=False)
    doc: dict[str, Any] = res["doc"]
    return doc


def _check(doc: dict[str, Any], name: str) -> dict[str, Any]:
    c: dict[str, Any] | None = next((c for c in doc.get("checks", []) if c["name"] == name), None)
    if c is None:
        pytest.fail(f"the hpc probe reported no '{name}' check", pytrace=False)
    if c["status"] == "failed":
        pytest.fail(f"{name}: {c['reason']}", pytrace=False)
    if c["status"] == "skipped":
        pytest.skip(c["reason"])
    return c


def test_hpc_mode_is_real(hpc_doc: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """The container really ran as enroot/Apptainer would start it, else every other hpc check proves nothing."""
    facts = hpc_doc.get("hpc") or {}
    ident = facts.get("identity") or {}
    want = request.config.getoption("hpc_user", None)
    if want and f"{ident.get('uid')}:{ident.get('gid')}" != want:
        pytest.fail(f"the hpc probe ran as {ident.get('uid')}:{ident.get('gid')}, not {want}", pytrace=False)
    if ident.get("user") is not None:
        pytest.fail(f"uid {ident.get('uid')} has a passwd entry ({ident['user']}) in the image: not an unknown user",
                    pytrace=False)
    if not facts.get("root_read_only"):
        pytest.fail("the root filesystem was writable: not started read-only", pytrace=False)
    missing = [k for k in ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME") if k not in (facts.get("host_env") or {})]
    if missing:
        pytest.fail(f"the hostile host environment lacks {', '.join(missing)}", pytrace=False)


@pytest.mark.parametrize("name", ["identity", "home", "host_env", "torch_import", "compile_caches", "compile"])
def test_hpc_runtime(hpc_doc: dict[str, Any], name: str) -> None:
    _check(hpc_doc, f"hpc.{name}")


def test_hpc_cuda(hpc_doc: dict[str, Any], smoke: Any, probe_lib: ModuleType) -> None:
    c: dict[str, Any] = next((c for c in hpc_doc.get("checks", []) if c["name"] == "hpc.cuda"), {})
    if (c.get("status") == "skipped" and smoke.require_gpu and not smoke.cpu_variant()
            and str(c.get("reason", "")).startswith(probe_lib.NO_GPU)):
        pytest.fail(f"hpc.cuda: {c['reason']} (--require-gpu)", pytrace=False)
    _check(hpc_doc, "hpc.cuda")


def test_hpc_te(hpc_doc: dict[str, Any], smoke: Any) -> None:
    want = str(smoke.expected_value("transformer_engine") or "").strip().lower()
    c: dict[str, Any] = next((c for c in hpc_doc.get("checks", []) if c["name"] == "hpc.te"), {})
    if want not in ("", "none") and c.get("status") == "skipped":
        pytest.fail(f"transformer_engine {want} is planned but the hpc probe found none: {c.get('reason')}",
                    pytrace=False)
    _check(hpc_doc, "hpc.te")


@pytest.mark.parametrize("name", ["jupyter", "dev_tools"])
def test_hpc_dev(hpc_doc: dict[str, Any], smoke: Any, name: str) -> None:
    if smoke.flavor != "dev":
        pytest.skip(f"{name}: the dev image's tools; this is a {smoke.flavor} image")
    _check(hpc_doc, f"hpc.{name}")
