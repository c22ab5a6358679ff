"""Does a lock still fit its matrix? Offline: compares the lock with what the plan renders, never asks an index.

A lock is stale when the matrix asks for something the lock cannot give: an image it has no entry for, a pip
requirement whose locked version does not satisfy it (`torch==2.12.0` for the matrix's torch 2.13.0), a requirement
or an apt package it has no pin for, another Python/OS, another base. A newer upstream release does not make a lock
stale (as with cargo's or uv's `--locked`): that is what `imagebuild lock` is run for.
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement

from imagebuild.lock.model import BaseLock, Lock, LockedImage, PipPin, canonical_name
from imagebuild.models import ImagePlan
from imagebuild.secrets import redact


def _shown(req: Requirement) -> str:
    """`torch 2.13.0` for an exact pin, else the specifier as written (`numpy>=2`)."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==":
        return f"{req.name} {specs[0].version}"
    return f"{req.name}{req.specifier}" if specs else req.name


def _pip_problems(image: ImagePlan, locked: LockedImage, inherited: dict[str, PipPin]) -> list[str]:
    problems = []
    wanted: dict[str, Requirement] = {}
    for text in image.pip_requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            problems.append(f"pip requirement {text!r} cannot be checked ({exc})")
            continue
        wanted[canonical_name(req.name)] = req
        pin = locked.pin(req.name) or inherited.get(canonical_name(req.name))
        if pin is None:
            problems.append(f"{text} is not in the lock")
        elif not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{pin.requirement()} does not match the matrix's {_shown(req)}")
    had = set()
    for text in locked.pip_requires:
        try:
            had.add(canonical_name(Requirement(text).name))
        except InvalidRequirement:
            had.add(canonical_name(text))
    problems += [f"{wanted[n]} was added to the matrix after the lock was made" for n in sorted(set(wanted) - had)
                 if locked.pin(n) or inherited.get(n)]  # (unpinned ones are named above)
    problems += [f"the lock was made for pip requirement {n}, which the matrix no longer asks for"
                 for n in sorted(had - set(wanted))]
    return problems


def _base_problems(image: ImagePlan, base: BaseLock | None) -> list[str]:
    v = image.variant
    if base is None:
        return ["the lock has no base entry for this base image"]
    if base.kind != v.base.kind:
        return [f"base kind {base.kind} in the lock, the matrix's is {v.base.kind}"]
    if v.base.kind == "registry":
        return [] if base.ref == v.base.ref else [f"base {base.ref} in the lock, the matrix's is {v.base.ref}"]
    problems = []
    mirror = redact(v.base.mirror or v.os.mirror)
    pairs = (("suite", base.suite, v.os.codename), ("mirror", base.mirror, mirror),
             ("snapshot", base.snapshot, v.base.snapshot),
             ("base packages", ",".join(sorted(base.extra_packages)) or "none",
              ",".join(sorted(v.base.packages)) or "none"))
    for what, had, now in pairs:
        if had != now:
            problems.append(f"bootstrap {what} {had} in the lock, the matrix's is {now}")
    return problems


def image_problems(image: ImagePlan, locked: LockedImage | None, inherited: dict[str, PipPin]) -> list[str]:
    """Why `locked` does not fit `image` (empty: it fits). `inherited`: the pins of the image's parents."""
    if locked is None:
        return ["not in the lock (the matrix builds it): run `imagebuild lock` for this matrix"]
    v = image.variant.versions
    problems = []
    if locked.python != v.python:
        problems.append(f"python {locked.python} in the lock, the matrix's is {v.python}")
    if locked.os != v.os:
        problems.append(f"os {locked.os} in the lock, the matrix's is {v.os}")
    problems += _pip_problems(image, locked, inherited)
    apt_now, apt_had = set(image.apt_packages), set(locked.apt)
    problems += [f"apt package {p} is not in the lock" for p in sorted(apt_now - apt_had)]
    problems += [f"apt package {p} is locked but the matrix no longer installs it" for p in sorted(apt_had - apt_now)]
    if image.parent is None:
        problems += _base_problems(image, locked.base)
    return problems


def inherited_pins(lock: Lock, images: list[ImagePlan], image: ImagePlan) -> dict[str, PipPin]:
    """The pins of `image`'s parents (grandparent first, so a parent's upgrade wins)."""
    by_tag = {i.tag: i for i in images}
    chain = []
    node = by_tag.get(image.parent) if image.parent else None
    while node is not None:
        chain.append(node)
        node = by_tag.get(node.parent) if node.parent else None
    pins: dict[str, PipPin] = {}
    for parent in reversed(chain):
        entry = lock.images.get(parent.id)
        if entry:
            pins.update({p.name: p for p in entry.pip})
    return pins


def problems(lock: Lock, images: list[ImagePlan]) -> list[str]:
    """Every way `lock` does not fit the plan's images, one line each: `<lock>: image <id>: <what>`."""
    out = []
    for image in images:
        for problem in image_problems(image, lock.images.get(image.id), inherited_pins(lock, images, image)):
            out.append(f"{lock.path}: image {image.id}: {problem}")
    planned = {i.id for i in images}
    out += [f"{lock.path}: image {i}: in the lock, but the matrix no longer builds it"
            for i in sorted(set(lock.images) - planned)]
    if lock.seal == "edited":  # a deleted transitive pin, a version changed with its hash kept: nothing above sees it
        out.append(f"{lock.path}: edited after `imagebuild lock` wrote it (its entries no longer give the "
                   "content_sha256 in its header)")
    elif lock.seal == "missing":
        out.append(f"{lock.path}: has no content_sha256 (an older imagebuild wrote it, or the line was removed), so "
                   "an edit inside it cannot be told apart")
    return out
