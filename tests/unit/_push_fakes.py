"""Fakes for the push unit tests (no tests here): a plan row, engine push streams, an in-memory engine API and
registry. Imported as `from _push_fakes import ...` by tests/unit/test_push_*.py.
"""

from __future__ import annotations

import docker.errors

from imagebuild.models import BaseSource, ImagePlan, OSInfo, ResolvedVariant, Versions
from imagebuild.oci import RegistryAuthError

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


def ok_stream(tag, digest=D1, layers=(("aaa", 1000),)):
    chunks = [{"status": f"The push refers to repository [{REG}/pytorch]"}]
    for lid, size in layers:
        chunks += [{"status": "Preparing", "id": lid},
                   {"status": "Pushing", "id": lid, "progressDetail": {"current": size // 2, "total": size}},
                   {"status": "Pushed", "id": lid}]
    chunks += [{"status": f"{tag}: digest: {digest} size: 528"},
               {"aux": {"Tag": tag, "Digest": digest, "Size": 528}, "progressDetail": {}}]
    return chunks


class FakeRegistry:
    def __init__(self, bad_auth=False):
        self.manifests: dict[tuple[str, str], str] = {}
        self.bad_auth = bad_auth
        self.auth_checks = 0
        self.serve_override: str | None = None

    def check_auth(self, repo, actions="pull,push"):
        self.auth_checks += 1
        if self.bad_auth:
            raise RegistryAuthError(f"{REG}: unauthorized: authentication required (HTTP 401)")

    def manifest_digest(self, repo, tag):
        if self.bad_auth:
            raise RegistryAuthError(f"{REG}: unauthorized: authentication required (HTTP 401)")
        return self.serve_override or self.manifests.get((repo, tag))


class FakeAPI:
    def __init__(self, registry: FakeRegistry, scripts=None):
        self.images: dict[str, dict] = {}
        self.registry = registry
        self.scripts = list(scripts or [])
        self.push_calls: list[tuple[str, str, dict | None]] = []
        self.tag_calls: list[tuple[str, str, str]] = []

    def add(self, ref, image_id="sha256:img1", repo_digests=(), labels=None):
        self.images[ref] = {"Id": image_id, "RepoDigests": list(repo_digests),
                            "Config": {"Labels": dict(labels or {})}}

    def inspect_image(self, ref):
        if ref in self.images:
            return self.images[ref]
        for info in self.images.values():
            if info["Id"] == ref:
                return info
        raise docker.errors.ImageNotFound(f"No such image: {ref}")

    def tag(self, image, repo, tag, force=False):
        self.tag_calls.append((image, repo, tag))
        self.images[f"{repo}:{tag}"] = self.inspect_image(image)

    def push(self, repo, tag, stream, decode, auth_config=None):
        assert stream and decode
        self.push_calls.append((repo, tag, auth_config))
        step = self.scripts.pop(0) if self.scripts else ok_stream(tag)
        if isinstance(step, Exception):
            raise step
        digest = None
        for c in step:
            if "aux" in c:
                digest = c["aux"]["Digest"]
        if digest:
            self.registry.manifests[(repo.split("/", 1)[1], tag)] = digest
            info = self.images[f"{repo}:{tag}"]
            if f"{repo}@{digest}" not in info["RepoDigests"]:
                info["RepoDigests"].append(f"{repo}@{digest}")
        return iter(step)


class FakeClient:
    def __init__(self, api):
        self.api = api
