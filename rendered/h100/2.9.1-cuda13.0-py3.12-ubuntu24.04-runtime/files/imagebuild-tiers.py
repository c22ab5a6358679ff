"""Split one resolved Python environment into layer tiers, ordered from what changes least to what changes most.

This file is shipped as it is into the runtime build's resolve stage (context file files/imagebuild-tiers.py) and run
there by the image's own Python: standard library only, nothing from imagebuild (like the smoke probe).

Why tiers: one layer for the whole environment means any change (one more package, a patch release of one wheel)
replaces all of it and every node pulls all of it again. Here the environment is resolved ONCE (pip --dry-run
--report: metadata only, nothing installed), then each package is given to one tier; each tier is then installed
on its own (`pip install --no-deps` of exact pins) into its own layer. A tier file that does not change is a cache
hit on both builders (a COPY's cache key is its content), so its layer keeps its digest.

Which tier holds a package:
- a package a tier OWNS by name (nvidia-cu* for the CUDA wheels, nvidia-cudnn-* for cuDNN's, torch/triton,
  torchvision/torchaudio, transformer_engine*) is that tier's; where two tiers' patterns match, the closer one
  (owner());
- any other package (a dependency such as sympy or numpy) is in the LOWEST tier whose own environment already has it
  at its final version, and where it stays so in every tier above. The environment of tier k is resolved from tier
  k's and the lower tiers' requirements alone (their owned packages pinned at their final versions; a run of tiers
  that only own, such as the nvidia ones, is resolved once at its top: tier_environments). So a package an
  upper tier would upgrade (or downgrade) is that upper tier's: adding `sympy==1.14` to the matrix's packages moves
  sympy into the matrix tier instead of rewriting the torch tier, and the torch layer keeps its digest.

Usage (in the resolve stage):
    python imagebuild-tiers.py SPEC OUT [--lock LOCKFILE] -- <pip install options: --find-links, --only-binary ...>
SPEC is JSON: {"tiers": [{"name": ..., "owns": [glob, ...], "requires": [requirement, ...]}, ...]} in layer order.
OUT gets one `<name>.txt` per tier (sorted `name==version` lines, `--hash=sha256:...` added from the lock), empty
for a tier that holds nothing. pip older than 25.3 (22.2 has --dry-run, 25.3 reads wheels lazily: pip_environment)
resolves with a newer pip fetched into a scratch folder of the resolve stage, never into the image.
With a lock (every file pinned by version and sha256) the lock IS the final environment: the tiers' own
environments are resolved with the lock as constraints, so nothing there moves with the index.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence

Resolver = Callable[[Sequence[str]], dict[str, str]]  # requirements -> {canonical name: version}


def canonical(name: str) -> str:
    """PEP 503 normalised name (`Jinja2` -> `jinja2`, `transformer_engine` -> `transformer-engine`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def owner(name: str, tiers: Sequence[Mapping[str, object]]) -> int | None:
    """The index of the tier that owns `name` by one of its glob patterns, else None. Where patterns of several
    tiers match, the one that names it most closely wins (the most characters that are not `*`/`?`: `nvidia-cudnn-*`
    over `nvidia-*`); on a tie, the lowest tier."""
    best: tuple[int, int] | None = None  # (closeness, -index)
    for index, tier in enumerate(tiers):
        for pattern in tier.get("owns", ()) or ():  # type: ignore[attr-defined]
            if fnmatch.fnmatchcase(canonical(name), canonical(str(pattern))):
                closeness = len(str(pattern).replace("*", "").replace("?", ""))
                if best is None or (closeness, -index) > best:
                    best = (closeness, -index)
    return None if best is None else -best[1]


def assign(tiers: Sequence[Mapping[str, object]], final: Mapping[str, str],
           partial: Mapping[int, Mapping[str, str]]) -> list[list[str]]:
    """Each tier's packages (canonical names, sorted). `final` is the whole environment; `partial[k]` the environment
    resolved from tiers 0..k alone (only for the tiers that add something; the last tier's is `final` itself)."""
    envs = {**{k: dict(v) for k, v in partial.items()}, len(tiers) - 1: dict(final)}
    order = sorted(envs)
    out: list[list[str]] = [[] for _ in tiers]
    for name, version in final.items():
        index = owner(name, tiers)
        if index is None:
            index = len(tiers) - 1
            for pos, k in enumerate(order):  # the lowest tier from which on it is there at its final version
                if all(envs[j].get(name) == version for j in order[pos:]):
                    index = k
                    break
        out[index].append(name)
    return [sorted(names) for names in out]


def tier_environments(tiers: Sequence[Mapping[str, object]], final: Mapping[str, str],
                      resolve: Resolver) -> dict[int, dict[str, str]]:
    """The environment of each tier below the last that adds requirements or owned packages: resolved from its own
    and the lower tiers' requirements, every owned package of those tiers pinned at its final version.
    A run of tiers that only own packages (the nvidia-* tiers: no requirements of their own) is resolved once, at
    its top: a dependency their wheels bring that no tier owns lands in that top tier (one resolution, not five)."""
    envs: dict[int, dict[str, str]] = {}
    requirements: list[str] = []
    owners = {n: owner(n, tiers) for n in final}
    owned = [[f"{n}=={v}" for n, v in sorted(final.items()) if owners[n] == k] for k in range(len(tiers))]
    asks = [[str(r) for r in tier.get("requires", ()) or ()] for tier in tiers]  # type: ignore[attr-defined]
    for k in range(len(tiers) - 1):
        if not asks[k] + owned[k]:
            continue
        requirements += asks[k] + owned[k]
        if not asks[k] and k + 1 < len(tiers) - 1 and not asks[k + 1] and owned[k + 1]:
            continue  # the next tier only owns too: resolved with it
        envs[k] = resolve(list(requirements))
    return envs


def read_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """A --require-hashes requirements file -> {name: (version, [sha256 hashes])}."""
    out: dict[str, tuple[str, list[str]]] = {}
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("--") else ""
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)(.*)$", line)
        if m:
            out[canonical(m.group(1))] = (m.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", m.group(3)))
    return out


def tier_text(names: Sequence[str], final: Mapping[str, str], hashes: Mapping[str, Sequence[str]]) -> str:
    lines = []
    for name in names:
        extra = "".join(f" --hash=sha256:{h}" for h in hashes.get(name, ()))
        lines.append(f"{name}=={final[name]}{extra}")
    return "".join(line + "\n" for line in lines)


DRY_RUN_PIP = (22, 2)  # the first pip with install --dry-run and --report
LAZY_WHEEL_PIP = (25, 3)  # the first pip whose lazy wheels cost a few range requests (24.0-25.2: slower than whole)
LAZY_WHEELS = "--use-feature=fast-deps"
# the pip fetched where the venv's is older: pinned by the sha256 of its one file (py3-none-any), so even a locked
# build runs no unpinned code and every resolve of a matrix runs the same pip; 26.3 needs Python 3.10, 25.3 runs on
# 3.9 (a 3.8 venv matches neither: pip_environment's last resort)
LAZY_PIPS = (
    'pip==26.3 ; python_version >= "3.10" --hash=sha256:f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13',
    'pip==25.3 ; python_version == "3.9" --hash=sha256:9655943313a94722b7774661c21049070f6bbb0a1516bf02f7c8d5d9201514cd',
)


def pip_version(python: str, env: Mapping[str, str]) -> tuple[int, ...]:
    out = subprocess.run([python, "-c", "import pip; print(pip.__version__)"], check=True, capture_output=True,
                         text=True, env=dict(env)).stdout
    return tuple(int(p) for p in re.findall(r"\d+", out)[:2])


def pip_environment(python: str, pip_options: Sequence[str], scratch: str) -> tuple[dict[str, str], bool]:
    """The environment pip runs in, and whether that pip reads wheels lazily (LAZY_WHEEL_PIP): this venv's own pip
    when it does, else a newer pip fetched into `scratch` (never into the image), else this venv's pip where it can
    --dry-run. pip's HTTP cache
    lives in `scratch` for this run (the image's PIP_NO_CACHE_DIR would make each resolution fetch the metadata
    again); BuildKit's cache mount is used instead where the stage has it (PIP_NO_CACHE_DIR already unset there).

    Why a newer pip: an index without PEP 658 metadata files (a plain file server, a mirror, a proxy) makes pip
    download each whole wheel to read its METADATA, in every resolution, and it caches none without the index's
    cache headers. This stage resolves once per tier: the CUDA 13 runtime downloaded ~3 GB each time, 40-47 s of a
    one-package rebuild (bench/loop-cuda.md). pip >= 25.3 reads METADATA through HTTP range requests instead."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if "PIP_NO_CACHE_DIR" in env:  # keep pip's HTTP cache across this stage's resolutions (the base image sets it)
        del env["PIP_NO_CACHE_DIR"]
        env["PIP_CACHE_DIR"] = os.path.join(scratch, "cache")
    version = pip_version(python, env)
    if version >= LAZY_WHEEL_PIP:
        return env, True
    target = os.path.join(scratch, "pip")
    pinned = os.path.join(scratch, "pip-pinned.txt")
    with open(pinned, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in LAZY_PIPS))
    attempts = [["--require-hashes", "-r", pinned]]
    if version < DRY_RUN_PIP:  # a 3.8 venv whose pip cannot --dry-run: the newest pip it runs, as before pip 25.3
        attempts.append(["pip>=23.1"])
    for wanted in attempts:
        fetched = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
                                  target, *pip_options, *wanted], capture_output=True, text=True, env=env)
        if fetched.returncode == 0 and os.path.isdir(os.path.join(target, "pip")):  # (markers may leave out both)
            return {**env, "PYTHONPATH": target}, wanted is attempts[0]  # a pinned pip; the last resort's is older
    said = [ln.strip() for ln in (fetched.stderr or fetched.stdout or "").splitlines() if ln.strip()]
    why = [ln for ln in said if ln.startswith("ERROR:")][:1] or said[-1:] or ["nothing installed"]
    if version >= DRY_RUN_PIP:
        print(f"resolve: no pip 25.3+ from the index ({why[0]}); this venv's pip resolves, reading whole wheels "
              "where the index has no metadata files", flush=True)
        return env, False
    sys.stderr.write(fetched.stderr or "")
    raise subprocess.CalledProcessError(fetched.returncode, fetched.args)


def lazy_wheels(python: str, env: Mapping[str, str]) -> list[str]:
    """pip's fast-deps option where this pip (one whose lazy wheels are fast: pip_environment says) has it: where an
    index has no PEP 658 file, pip then reads a wheel's METADATA through HTTP range requests (a few KB, not the
    wheel). A PEP 658 file is still preferred, a server without ranges still sends the whole wheel, a local file is
    read as before. An option pip does not know fails its parse, so a pip that dropped it is asked without."""
    probe = subprocess.run([python, "-m", "pip", "install", LAZY_WHEELS, "--help"], capture_output=True,
                           env=dict(env))
    return [LAZY_WHEELS] if probe.returncode == 0 else []


# what pip says when the requirements, not the way it read the metadata, are the problem: asked again, no retry
_NO_RETRY = ("ResolutionImpossible", "No matching distribution", "Could not find a version", "conflicting dependencies")


def pip_resolver(python: str, pip_options: Sequence[str], constraints: str | None,
                 env: Mapping[str, str], lazy: list[str] | None = None) -> Resolver:
    """pip install --dry-run --report: what pip would install into this environment for these requirements (packages
    the parent image already has at a fitting version are not in it, as in a real install). With `lazy` (LAZY_WHEELS)
    a failure that is not the requirements' own is resolved again reading whole wheels, said in one line, and the
    rest of the stage reads whole wheels too (`lazy` is emptied)."""
    lazy = lazy if lazy is not None else []

    def run(argv: list[str], requirements: Sequence[str]) -> None:
        if not lazy:
            subprocess.run([*argv, *requirements], check=True, env=dict(env))
            return
        proc = subprocess.run([*argv, *lazy, *requirements], capture_output=True, text=True, env=dict(env))
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
        # pip's every-run warning that fast-deps is experimental: said once by main(), not per resolution
        sys.stderr.write("".join(line for line in proc.stderr.splitlines(keepends=True) if LAZY_WHEELS not in line))
        sys.stderr.flush()
        if proc.returncode == 0:
            return
        if any(marker in proc.stderr for marker in _NO_RETRY):
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
        print("resolve: pip failed reading wheels' metadata by HTTP range requests (fast-deps); resolving again "
              "with whole wheels", flush=True)
        lazy.clear()
        subprocess.run([*argv, *requirements], check=True, env=dict(env))

    def resolve(requirements: Sequence[str]) -> dict[str, str]:
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            argv = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
                    "--report", report, *pip_options]
            if constraints:
                argv += ["-c", constraints]
            run(argv, requirements)
            with open(report, encoding="utf-8") as f:
                doc = json.load(f)
        return {canonical(i["metadata"]["name"]): str(i["metadata"]["version"]) for i in doc.get("install", [])}
    return resolve


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    pip_options = args[args.index("--") + 1:] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    lock_path = None
    if "--lock" in args:
        lock_path = args[args.index("--lock") + 1]
        del args[args.index("--lock"): args.index("--lock") + 2]
    spec_path, out_dir = args
    with open(spec_path, encoding="utf-8") as f:
        tiers = json.load(f)["tiers"]
    constraints = None
    hashes: dict[str, list[str]] = {}
    if lock_path:
        with open(lock_path, encoding="utf-8") as f:
            locked = read_lock(f.read())
        final = {n: v for n, (v, _) in locked.items()}
        hashes = {n: h for n, (_, h) in locked.items()}
        constraints = os.path.join(out_dir, ".constraints.txt")
        os.makedirs(out_dir, exist_ok=True)
        with open(constraints, "w", encoding="utf-8") as f:
            f.write("".join(f"{n}=={v}\n" for n, v in sorted(final.items())))
    with tempfile.TemporaryDirectory() as scratch:
        env, lazily = pip_environment(sys.executable, pip_options, scratch)
        lazy = lazy_wheels(sys.executable, env) if lazily else []
        if lazy:
            print("resolve: where the index has no metadata file (PEP 658), pip reads each wheel's METADATA by HTTP "
                  f"range requests ({LAZY_WHEELS}), not the whole wheel", flush=True)
        resolve = pip_resolver(sys.executable, pip_options, constraints, env, lazy)
        if not lock_path:
            final = resolve([str(r) for t in tiers for r in t.get("requires", ())])
        names = assign(tiers, final, tier_environments(tiers, final, resolve))
    os.makedirs(out_dir, exist_ok=True)
    if constraints:
        os.remove(constraints)
    for tier, held in zip(tiers, names, strict=True):
        with open(os.path.join(out_dir, f"{tier['name']}.txt"), "w", encoding="utf-8") as f:
            f.write(tier_text(held, final, hashes))
        print(f"tier {tier['name']}: {' '.join(f'{n}=={final[n]}' for n in held) or '(nothing)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
