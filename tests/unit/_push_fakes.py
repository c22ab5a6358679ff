"""Push test helpers (no tests here): a plan row, the shared fake engine and registry (with its copier) set up
for a push. Imported as `from _push_fakes import ...` by tests/unit/test_push_*.py.
"""

from __future__ import annotations

from _fake_engine import FakeEngine
from _fake_registry import FakeRegistry

from imagebuild.models import BaseSource, ImagePlan, OSInfo, ResolvedVariant, Versions

REG = "127.0.0.1:5999"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def make_image(torch="2.9.1", flavor="runtime", aliases=(), parent=None, registry=REG, cuda="12.8"):
    osinfo = OSInfo("debian12", "debian", "12", "bookworm", "3.11", (), "http://deb.debian.org/debian", "2.36")
    key = f"{torch}-cuda{cuda}-py3.11-debian12"
    variant = ResolvedVariant(
        key=key, name="pytorch", registry=registry, versions=Versions(torch, cuda, "3.11", "debian12", "9.10.2.21"),
        cuda_tag="cu128", os=osinfo, base=BaseSource("bootstrap"), torch_index_url=None,
        flavors=("base", "runtime"), tf32=True, gpu_archs=("sm_90",), arch_list=("sm_80", "sm_90"), min_driver="525",
    )
    repo = f"{registry}/pytorch" if registry else "pytorch"
    return ImagePlan(id=f"{key}-{flavor}", tag=f"{repo}:{key}-{flavor}", flavor=flavor, parent=parent,
                     variant=variant, dockerfile="FROM x\n", build_args={}, context_files={}, labels={},
                     inputs_hash="h-" + key + flavor, aliases=tuple(f"{repo}:{a}" for a in aliases))


def fake_registry(bad_auth: bool = False) -> FakeRegistry:
    return FakeRegistry(REG, bad_auth=bad_auth)


def fake_engine(registry: FakeRegistry) -> FakeEngine:
    """The fake engine beside `registry` (push copies its saved images there through the registry's copier)."""
    return FakeEngine(registry)


def add(engine: FakeEngine, ref: str, image_id: str = "sha256:img1", repo_digests=(), labels=None) -> None:
    """A local image `ref` (several refs may name one image ID, as tags do)."""
    engine.add_image(ref, labels or {}, image_id=image_id, repo_digests=tuple(repo_digests))
