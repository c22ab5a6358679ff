"""Fakes for the build unit tests: hand-made ImagePlans and an in-memory engine speaking the SDK's low-level API.

(No tests here: a helper module, imported as `from _support import ...` by tests/unit/test_build_*.py.)
"""

from __future__ import annotations

import hashlib
import io
import itertools
import tarfile
import threading

import docker

from imagebuild.compat import load as load_tables
from imagebuild.models import BaseSource, ImagePlan, OSInfo, Plan, ResolvedVariant, Versions

DEBIAN12 = OSInfo(id="debian12", family="debian", version="12", codename="bookworm", system_python="3.11",
                  installable_pythons=("3.11",), mirror="http://deb.debian.org/debian", glibc="2.36",
                  archive_keys=load_tables().os["debian12"].archive_keys, keyring="debian-archive.asc")


def variant(key: str = "2.13.0-cpu-py3.11-debian12", cuda: str = "cpu", base: BaseSource | None = None,
            osinfo: OSInfo = DEBIAN12) -> ResolvedVariant:
    return ResolvedVariant(
        key=key, name="ibtest", registry="", versions=Versions(torch="2.13.0", cuda=cuda, python="3.11",
                                                               os=osinfo.id),
        cuda_tag="cpu" if cuda == "cpu" else "cu" + cuda.replace(".", ""), os=osinfo,
        base=base or BaseSource(kind="registry", ref="example/os:1@sha256:" + "0" * 64),
        torch_index_url=None, flavors=("base", "runtime", "dev"), tf32=True, gpu_archs=(), arch_list=(),
        min_driver=None,
    )


def image(key: str, flavor: str, parent: ImagePlan | None, dockerfile: str | None = None,
          var: ResolvedVariant | None = None, repo: str = "ibtest", **kw) -> ImagePlan:
    var = var or variant(key)
    dockerfile = dockerfile or f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nRUN echo {key}-{flavor}\n"
    h = hashlib.sha256(((parent.inputs_hash if parent else "") + dockerfile + key + flavor).encode()).hexdigest()
    kw.setdefault("build_args", {})
    kw.setdefault("context_files", {})
    kw.setdefault("labels", {"io.imagebuild.flavor": flavor})
    return ImagePlan(id=f"{key}-{flavor}", tag=f"{repo}:{key}-{flavor}", flavor=flavor,
                     parent=parent.tag if parent else None, variant=var, dockerfile=dockerfile,
                     inputs_hash="sha256:" + h, **kw)


def chain(key: str, flavors=("base", "runtime", "dev"), dockerfiles: dict | None = None, **kw) -> list[ImagePlan]:
    out, parent = [], None
    var = variant(key)
    for f in flavors:
        parent = image(key, f, parent, (dockerfiles or {}).get(f), var=var, **kw)
        out.append(parent)
    return out


def plan_of(*chains) -> Plan:
    return Plan(matrix_file="test.yaml", images=[i for c in chains for i in c])


class FakeAPI:
    """The subset of docker.APIClient the executor uses. A Dockerfile line `RUN false` fails the build."""

    def __init__(self):
        self.images_by_id: dict[str, dict] = {}
        self.tags: dict[str, str] = {}
        self.builds: list[dict] = []
        self.lock = threading.Lock()
        self.counter = itertools.count(1)
        self.active = 0
        self.max_active = 0
        self.removed: list[str] = []

    # images
    def add_image(self, tag: str | None, labels: dict, size: int = 1000) -> str:
        iid = "sha256:" + hashlib.sha256(f"{next(self.counter)}".encode()).hexdigest()
        self.images_by_id[iid] = {"Id": iid, "Size": size, "Config": {"Labels": dict(labels)}}
        if tag:
            self.tags[tag] = iid
        return iid

    def inspect_image(self, ref: str) -> dict:
        iid = self.tags.get(ref, ref)
        if iid not in self.images_by_id:
            raise docker.errors.ImageNotFound(f"No such image: {ref}")
        return self.images_by_id[iid]

    def images(self, filters=None):
        wanted = filters.get("label", []) if filters else []
        wanted = [wanted] if isinstance(wanted, str) else wanted
        out = []
        for iid, info in self.images_by_id.items():
            labels = info["Config"]["Labels"]
            if all(labels.get(w.split("=", 1)[0]) == w.split("=", 1)[1] for w in wanted):
                repo_tags = sorted(t for t, i in self.tags.items() if i == iid)
                out.append({"Id": iid, "Labels": labels, "RepoTags": repo_tags or ["<none>:<none>"]})
        return out

    def tag(self, image, repository, tag=None, force=False):
        self.tags[f"{repository}:{tag}"] = self.inspect_image(image)["Id"]
        return True

    def history(self, image):
        return [{"Size": 700, "CreatedBy": "/bin/sh -c big"}, {"Size": 300, "CreatedBy": "/bin/sh -c small"},
                {"Size": 0, "CreatedBy": "LABEL x"}]

    def remove_container(self, cid, force=False):
        self.removed.append(cid)

    def info(self):
        return {"DockerRootDir": "/nonexistent"}

    # build
    def build(self, fileobj=None, custom_context=False, decode=False, tag=None, buildargs=None, labels=None, **kw):
        with tarfile.open(fileobj=fileobj) as tar:
            dockerfile = tar.extractfile("Dockerfile").read().decode()
            names = tar.getnames()
        record = {"tag": tag, "buildargs": dict(buildargs or {}), "labels": dict(labels or {}),
                  "dockerfile": dockerfile, "kw": kw, "context": names}
        with self.lock:
            self.builds.append(record)
        steps = [ln for ln in dockerfile.splitlines() if ln and not ln.startswith("#")]
        return self._stream(steps, tag, labels or {})

    def _stream(self, steps, tag, labels):
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            for k, step in enumerate(steps, 1):
                yield {"stream": f"Step {k}/{len(steps)} : {step}"}
                yield {"stream": "\n"}
                if step.startswith("RUN"):
                    yield {"stream": f" ---> Running in {k:012x}\n"}
                    yield {"stream": f"output of {step}\n"}
                    if step.strip() == "RUN false":
                        yield {"errorDetail": {"code": 1, "message": "The command '/bin/sh -c false' returned a "
                                                                    "non-zero code: 1"},
                               "error": "The command '/bin/sh -c false' returned a non-zero code: 1"}
                        return
            iid = self.add_image(tag, labels)
            yield {"aux": {"ID": iid}}
            yield {"stream": f"Successfully built {iid[7:19]}\n"}
        finally:
            with self.lock:
                self.active -= 1


class FakeClient:
    def __init__(self):
        self.api = FakeAPI()

    def info(self):
        return self.api.info()


def context_names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getnames()
