"""Hand-made ImagePlans for the build unit tests (the fake engine is _fake_engine.py's, the one for every test).

(No tests here: a helper module, imported as `from _support import ...` by tests/unit/test_build_*.py.)
"""

from __future__ import annotations

import hashlib
import io
import tarfile

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


def context_names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getnames()
