"""Benchmark figures for the push path (printed; run with -s): a base -> runtime -> dev chain shaped like the CPU
matrix's layer stack, pushed through a pass-through proxy that counts the bytes on the wire; then the runtime image
is rebuilt as after a runtime-template change (its last layer differs, the big layer is the same) and pushed again."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from imagebuild.models import Plan
from imagebuild.push import push_plan

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import Images, auth, image_plan, ns  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]

MB = 1 << 20
SIZE = int(os.environ.get("IB_BENCH_MB", "24"))  # size of the big layers, MiB


def test_push_bench(docker_client, registry):  # fixtures: tests/integration/conftest.py
    images = Images(docker_client)
    host, port = registry["REGISTRY"].split(":")
    try:
        with FaultProxy((host, int(port))) as proxy:
            reg = f"{proxy.address}/{ns()}"
            base, rt, dev = (image_plan(reg, f, None) for f in ("base", "runtime", "dev"))
            rt.parent, dev.parent = base.tag, rt.tag
            big = {"base": os.urandom(SIZE * MB), "runtime": os.urandom(2 * SIZE * MB), "dev": os.urandom(SIZE * MB)}
            base_id = images.build({"os.bin": big["base"]}, None, base.tag)
            rt_id = images.build({"torch.bin": big["runtime"], "tf32.pth": b"v1\n"}, base_id, rt.tag)
            images.build({"tools.bin": big["dev"]}, rt_id, dev.tag)
            plan = Plan("bench.yaml", [base, rt, dev])

            t0 = time.monotonic()
            first = push_plan(plan, client=docker_client, auth_for=auth, require_tests=False)
            t_first, up_first = time.monotonic() - t0, proxy.bytes_up
            assert [r.push["status"] for r in first] == ["pushed"] * 3

            # runtime template change: only the layer after the big one differs; dev is rebuilt on the new parent
            rt_id2 = images.build({"torch.bin": big["runtime"], "tf32.pth": b"v2\n"}, base_id, rt.tag)
            images.build({"tools.bin": big["dev"]}, rt_id2, dev.tag)
            proxy.reset_counters()
            t0 = time.monotonic()
            second = push_plan(plan, client=docker_client, auth_for=auth, require_tests=False)
            t_second, up_second = time.monotonic() - t0, proxy.bytes_up
            assert [r.push["status"] for r in second] == ["unchanged", "pushed", "pushed"], [r.push for r in second]

            layer_total = sum(len(b) for b in big.values())
            print(f"\npush bench: layers {layer_total / MB:.0f} MiB (random, incompressible)")
            print(f"  first push : {t_first:6.2f} s, {up_first / MB:8.2f} MiB sent "
                  f"({sum(r.push['layers_pushed'] for r in first)} layer uploads)")
            print(f"  after runtime change: {t_second:6.2f} s, {up_second / 1024:8.1f} KiB sent "
                  f"({sum(r.push['layers_pushed'] for r in second)} layers uploaded)")
            assert up_first > layer_total
            assert up_second < 64 * 1024, "only the changed small layer, configs and manifests"
    finally:
        images.cleanup()
