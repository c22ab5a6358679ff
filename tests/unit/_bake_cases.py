"""The plan the bake export's tests share: two chains (base -> runtime -> dev), one on a bootstrapped Debian 12, one
on a registry base pinned by digest; credentialed and literal-`${` build args, aliases on the first chain.

(No tests here: a helper module, imported as `from _bake_cases import make_plan`.)
"""

from __future__ import annotations

from imagebuild.models import BaseSource, ImagePlan, OSInfo, Plan, ResolvedVariant, Versions


def variant(torch="2.9.1", base=None, os_id="debian12"):
    osinfo = OSInfo(os_id, "debian", "12", "bookworm", "3.11", (), "http://deb.debian.org/debian", "2.36")
    return ResolvedVariant(
        key=f"{torch}-cpu-py3.11-{os_id}", name="pytorch", registry="127.0.0.1:5000/ml",
        versions=Versions(torch, "cpu", "3.11", os_id), cuda_tag="cpu", os=osinfo,
        base=base or BaseSource("bootstrap"), torch_index_url=None, flavors=("base", "runtime", "dev"), tf32=True,
        gpu_archs=(), arch_list=(), min_driver=None)


def chain(v, with_aliases=True):
    images, parent = [], None
    for flavor in ("base", "runtime", "dev"):
        tag = f"127.0.0.1:5000/ml/pytorch:{v.key}-{flavor}"
        img = ImagePlan(
            id=f"{v.key}-{flavor}", tag=tag, flavor=flavor, parent=parent.tag if parent else None, variant=v,
            dockerfile=f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nRUN echo {flavor}\n",
            build_args={"PYTHON": "3.11", "PIP_FLAGS": "--no-cache-dir ${NOT_A_VAR}"},
            context_files={"files/imagebuild_tf32.pth": b"import x\n"},
            labels={"io.imagebuild.flavor": flavor, "io.imagebuild.torch": v.versions.torch},
            inputs_hash=f"h-{flavor}",
            secret_build_args={"PIP_INDEX_URL": "https://u:p@idx/simple"} if flavor == "runtime" else {},
            aliases=(f"127.0.0.1:5000/ml/pytorch:2.9-cpu-{flavor}",) if with_aliases else (),
        )
        img.build_args["PIP_INDEX_URL"] = "https://u:p@idx/simple" if flavor == "runtime" else "x"
        if flavor != "runtime":
            img.build_args.pop("PIP_INDEX_URL")
        images.append(img)
        parent = img
    return images


def make_plan():
    a = chain(variant("2.9.1"))
    b = chain(variant("2.8.0", base=BaseSource("registry", ref="debian:12@sha256:" + "e" * 64), os_id="debian12b"),
              with_aliases=False)
    return Plan("images/cpu.yaml", a + b)
