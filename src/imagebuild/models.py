"""The tables that flow along the pipeline: matrix -> resolve -> render -> plan -> build -> test -> push -> report.

Every stage takes the previous stage's dataclasses and adds its own; nothing downstream re-reads YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from imagebuild.phases import Phase

FLAVORS: tuple[str, ...] = ("base", "runtime", "dev")
PARENT_FLAVOR: dict[str, str | None] = {"base": None, "runtime": "base", "dev": "runtime"}
# The platform of every image unless the matrix says otherwise (`platforms:`); a matrix, plan, record or report
# written before platforms existed reads as this one, and its images keep their IDs, tags and inputs hashes.
DEFAULT_PLATFORM = "linux/amd64"


def platform_arch(platform: str) -> str:
    """'linux/arm64' -> 'arm64' (the OCI architecture; also the suffix of its tags, keys and folders)."""
    return platform.split("/")[1] if "/" in platform else platform


def platform_suffix(platform: str) -> str:
    """'' for the default platform (names stay as before), '-arm64' for another: one tag per platform locally, the
    plain tag naming the default platform's image (a pushed index holds them all under it)."""
    return "" if platform == DEFAULT_PLATFORM else f"-{platform_arch(platform)}"


def platform_to_ask(platform: str) -> str | None:
    """The platform a build names explicitly: None for the default one (the builder's own, so a build of it stays as
    it was before platforms existed), else `platform`. BuildKit's --platform and the bake export's `platforms` both."""
    return None if platform == DEFAULT_PLATFORM else platform


@dataclass(frozen=True)
class Location:
    """Where a value came from, for error messages (`FILE:LINE: key.path: ...`)."""

    file: str
    line: int  # 1-based; 0 when unknown
    keypath: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class OSInfo:
    """One row of compat/data/os.yaml."""

    id: str  # "debian12", "ubuntu24.04"
    family: str  # "debian" | "ubuntu"
    version: str  # "12", "24.04"
    codename: str  # "bookworm", "noble"
    system_python: str  # "3.11"
    installable_pythons: tuple[str, ...]  # pythons the OS can add (e.g. deadsnakes on Ubuntu)
    mirror: str  # default bootstrap mirror
    glibc: str  # for manylinux checks
    components: tuple[str, ...] = ("main",)
    # bootstrap trust anchor: the archive signing keys (primary fingerprints) apt may accept for this suite and its
    # updates/security pockets, and the packaged key file (compat/data/keys/) they are exported from
    archive_keys: tuple[str, ...] = ()
    keyring: str | None = None
    # the mirror of the architectures `mirror` lacks (Ubuntu: ports.ubuntu.com/ubuntu-ports serves arm64)
    ports_mirror: str | None = None


@dataclass(frozen=True)
class Versions:
    """Every resolved pin of one variant. `cuda == "cpu"` for CPU builds (cudnn/nccl are then None)."""

    torch: str
    cuda: str
    python: str
    os: str
    cudnn: str | None = None
    nccl: str | None = None
    triton: str | None = None
    torchvision: str | None = None
    torchaudio: str | None = None
    transformer_engine: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "torch": self.torch,
            "cuda": self.cuda,
            "cudnn": self.cudnn,
            "nccl": self.nccl,
            "triton": self.triton,
            "python": self.python,
            "os": self.os,
            "torchvision": self.torchvision,
            "torchaudio": self.torchaudio,
            "transformer_engine": self.transformer_engine,
        }


@dataclass(frozen=True)
class BaseSource:
    """Where the base flavor's FROM comes from: a registry reference, or an OS rootfs bootstrapped from a mirror."""

    kind: str  # "bootstrap" | "registry"
    ref: str | None = None  # registry reference when kind == "registry"
    mirror: str | None = None  # bootstrap mirror (defaults to the OS's)
    snapshot: str | None = None  # e.g. "20251101T000000Z" (snapshot.debian.org style), optional
    packages: tuple[str, ...] = ()  # extra packages baked into the rootfs


@dataclass(frozen=True)
class ResolvedVariant:
    """One row of the matrix after defaults/include/exclude and compatibility resolution."""

    key: str  # "2.9.1-cuda12.8-py3.12-ubuntu24.04" / "2.13.0-cpu-py3.11-debian12"
    name: str  # image repository name (matrix `name`)
    registry: str  # push target, may be ""
    versions: Versions
    cuda_tag: str  # "cu128" | "cu130" | "cpu"
    os: OSInfo
    base: BaseSource
    torch_index_url: str | None  # None = PyPI (the release's default variant)
    flavors: tuple[str, ...]
    tf32: bool
    gpu_archs: tuple[str, ...]
    arch_list: tuple[str, ...]  # archs the torch wheel carries
    min_driver: str | None
    fp8_min_arch: str | None = None
    apt_packages: dict[str, tuple[str, ...]] = field(default_factory=dict)  # flavor -> extra apt packages
    pip_packages: dict[str, tuple[str, ...]] = field(default_factory=dict)  # flavor -> extra pip requirements
    ca_certs: tuple[str, ...] = ()  # CA files (paths) to add to the system store
    size_budget: dict[str, int] = field(default_factory=dict)  # flavor -> bytes
    perf_min: dict[str, float] = field(default_factory=dict)
    chosen: dict[str, str] = field(default_factory=dict)  # what resolution picked and why ("torch": "2.9 -> 2.9.1")
    source: Location | None = None
    backend: str = "auto"  # matrix `backend`: "auto" or a row of imagebuild/backends.py
    layer_limit: int | None = None  # matrix `layer_limit` in bytes (None: report.layers.DEFAULT_LAYER_LIMIT)
    platform: str = DEFAULT_PLATFORM  # one of the row's `platforms:`; resolve makes one variant per platform
    compression: dict[str, str] = field(default_factory=dict)  # matrix `compression`: registry ("*": any) -> zstd|gzip
    # target GPUs (matrix `gpus:`, else the image family's default): (name, compute capability) pairs, this platform's
    gpus: tuple[tuple[str, str], ...] = ()
    vscode: str | None = None  # matrix `vscode`: the code-server release the dev flavor carries (None: no VS Code)


@dataclass(frozen=True)
class TEWheelPlan:
    """How to build the transformer_engine wheel a runtime image installs (render/te_wheel.py): built once per `key`
    into a cache folder outside every image, handed to the image's build as the te-wheels/ context folder."""

    key: str
    dockerfile: str
    build_args: dict[str, str]
    secret_build_args: dict[str, str] = field(default_factory=dict)
    context_dirs: dict[str, Path] = field(default_factory=dict)


@dataclass
class ImagePlan:
    """One image to build. Children name their parent by `parent` (its tag) and FROM its image ID at build time."""

    id: str  # "<variant key>-<flavor>", unique in a plan, safe as a folder name
    tag: str  # full reference: "<registry>/<name>:<torch>-cuda<cuda>-cudnn<major>-py<python>-<os>-<flavor>"
    flavor: str
    parent: str | None  # parent's tag (None for base)
    variant: ResolvedVariant
    dockerfile: str  # rendered text
    build_args: dict[str, str]  # hashed, deterministic build args (BASE_IMAGE is filled in at build time)
    context_files: dict[str, bytes]  # extra files for the build context: relative path -> content
    labels: dict[str, str]  # deterministic labels (io.imagebuild.*, OCI title/version/source)
    inputs_hash: str  # sha256 over dockerfile, build args, context files and the parent's inputs hash
    context_dirs: dict[str, Path] = field(default_factory=dict)  # big host folders (wheelhouse): ctx path -> dir
    secret_build_args: dict[str, str] = field(default_factory=dict)  # never hashed, labelled, logged or reported;
    # only builder stages may use them (credentialed index URLs), so they never reach the final image's history
    aliases: tuple[str, ...] = ()  # the plan's alias decision: full references or short tags of `repository`
    dockerfile_path: Path | None = None  # where `render` wrote it
    te_wheel: TEWheelPlan | None = None  # runtime images with transformer_engine: how its cached wheel is built
    pip_requirements: tuple[str, ...] = ()  # what the flavor's pip stage asks for (render), before any lock
    apt_packages: tuple[str, ...] = ()  # apt packages its final stage installs from the OS archive (render)
    locked: bool = False  # installs from the matrix's lock (pip --require-hashes, apt name=version)
    env_layers: tuple[tuple[str, str], ...] = ()  # runtime: its environment's layers in order, (tier, what it holds)

    @property
    def repository(self) -> str:
        return self.tag.rsplit(":", 1)[0]

    @property
    def short_tag(self) -> str:
        return self.tag.rsplit(":", 1)[1]


@dataclass
class Plan:
    matrix_file: str
    images: list[ImagePlan]  # dependency order: every parent before its children
    lock_file: str = ""  # the lock the plan was rendered with ("" = none)

    def by_tag(self) -> dict[str, ImagePlan]:
        return {i.tag: i for i in self.images}


class BuildStatus(str, Enum):
    """ImageResult.status as the builder writes it (a str, so rows compare and serialise as before)."""

    PLANNED = "planned"
    BUILT = "built"
    UP_TO_DATE = "up-to-date"
    FAILED = "failed"
    NOT_BUILT = "not-built"  # a parent failed
    SKIPPED = "skipped"  # outside --only


HERE = (BuildStatus.BUILT, BuildStatus.UP_TO_DATE)
FINE = (*HERE, BuildStatus.SKIPPED)


@dataclass
class ImageResult:
    """What happened to one planned image across build -> test -> push; the rows of build-report.json.

    build fills status/image_id/size/layers/build_seconds/error/log_path, test fills `tests`, push fills `push`.
    """

    tag: str
    flavor: str
    inputs_hash: str
    versions: dict[str, str | None]
    parent: str | None = None
    status: str = "planned"  # planned | built | up-to-date | failed | not-built (a parent failed) | skipped
    image_id: str | None = None
    size: int | None = None  # bytes, as the engine reports
    layers: list[dict[str, Any]] = field(default_factory=list)  # 5 largest: {"size": int, "created_by": str}
    build_seconds: float | None = None
    error: str | None = None  # one paragraph: failing step + reason
    log_path: str | None = None
    tests: dict[str, Any] | None = None  # smokeresult.SmokeResult.to_json(): {"schema_version", "passed", "checks", ...}
    push: dict[str, Any] | None = None  # {"status": "pushed"|"unchanged"|"failed", "digest": ..., "tags": [...], ...}
    te_wheel: dict[str, Any] | None = None  # {"key": ..., "status": "cached"|"built", "seconds": float, "wheel": name}
    built_at: str | None = None  # when the build that made image_id ran (an up-to-date row keeps it)
    source: str | None = None  # where image_id is: "built" | "engine" | "registry <prefix>" (not pulled)
    sbom: dict[str, Any] | None = None  # {"path", "sha256", "image_id", "components", "spec"} (reports/<matrix>/sbom/)
    diff: dict[str, Any] | None = None  # a rebuild: {"against": previous image ID, "os"/"python": counts, "text"}
    reproduced_from: str | None = None  # rebuilt as this image ID, same content as image_id (kept): see reproduced.py
    rebuilt_because: str | None = None  # built for no input change: why (build --security-refresh's reason)
    backend: str | None = None  # what built it in this run: a row of imagebuild/backends.py (None: not built in this run)
    platform: str = DEFAULT_PLATFORM  # the image's OS/architecture (a report written before platforms: amd64)
    # the environment's layers as built (report/layers.py): [{"tier", "holds", "size"}], [] when not known
    env_layers: list[dict[str, Any]] = field(default_factory=list)
    # the hardware the image is for, from its planned labels (render/hardware.py): "h100=9.0,b200=10.0", "525.60.13"
    gpus: str | None = None
    min_driver: str | None = None
    # the record's last audit of exactly image_id (record/audits.audit_summary): counts or None (not audited)
    audit: dict[str, Any] | None = None
    # where this run's time on the image went (phases.py): build-report.json's `phases`, [] when not measured
    phases: list[Phase] = field(default_factory=list)

    @classmethod
    def of(cls, image: ImagePlan) -> ImageResult:
        """The planned row of `image` (every stage starts from this)."""
        return cls(tag=image.tag, flavor=image.flavor, inputs_hash=image.inputs_hash,
                   versions=image.variant.versions.as_dict(), parent=image.parent,
                   platform=image.variant.platform, gpus=image.labels.get("io.imagebuild.gpus") or None,
                   min_driver=image.labels.get("io.imagebuild.min-driver") or None)


# -- GPU truth of a tested image (issue 40): the report (report/) and the catalog (catalog/) read it alike ----------

COVERAGE_CHECK = "coverage.kernels"  # the suite's kernel-coverage check (smoke/suite/test_coverage.py)


def kernel_coverage(tests: dict[str, Any] | None, image_id: str | None) -> dict[str, Any]:
    """Which target GPUs the smoke run of `image_id` found running natively, only through PTX JIT, or not at all,
    from its coverage check's figures: {"state": "checked", "gpus": {name: arch}, "native": [arch], "ptx_jit":
    [arch], "none": [arch]} or {"state": "not checked", "why": ...} (no test run, a run of another image, the check
    skipped: a CPU torch, no CUDA library, no target GPUs). Never an empty "checked"."""
    if not tests:
        return {"state": "not checked", "why": "not tested"}
    ran_on = str(tests.get("image_id") or tests.get("image") or "")
    if image_id and ran_on.startswith("sha256:") and ran_on != image_id:
        return {"state": "not checked", "why": f"the test result is of another image ({ran_on[7:19]})"}
    checks = [c for c in _items(tests.get("checks")) if isinstance(c, dict) and c.get("name") == COVERAGE_CHECK]
    if not checks:
        return {"state": "not checked", "why": "the test result holds no coverage check"}
    check = checks[-1]
    raw = check.get("figures")
    figures: dict[str, Any] = raw if isinstance(raw, dict) else {}
    targets = [str(t) for t in _items(figures.get("targets"))]
    if check.get("status") == "skipped" or not targets:
        return {"state": "not checked", "why": str(check.get("reason") or "coverage check skipped")[:200]}
    native = [str(t) for t in _items(figures.get("native")) if str(t) in targets]
    ptx = [str(t) for t in _items(figures.get("ptx_jit")) if str(t) in targets]
    given = figures.get("gpus")
    named: dict[str, Any] = given if isinstance(given, dict) else {}
    return {"state": "checked", "gpus": {str(k): str(v) for k, v in named.items()}, "native": native,
            "ptx_jit": ptx, "none": [t for t in targets if t not in native and t not in ptx]}


def _items(value: object) -> list[Any]:
    """A list's items, a dict's keys, else nothing (a damaged report's figures never raise)."""
    return list(value) if isinstance(value, (list, dict)) else []


def _named(archs: list[str], gpus: dict[str, str]) -> str:
    out = []
    for arch in archs:
        names = [n for n, a in gpus.items() if a == arch]
        out.append(f"{', '.join(names)} ({arch})" if names else arch)
    return "; ".join(out)


def describe_coverage(coverage: dict[str, Any], targets_label: str | None) -> str:
    """One cell: `native: h100 (sm_90) · PTX JIT only: b200 (sm_100)`, or `not checked (why)`; an image with no
    target GPUs (a CPU image) is `not checked (no target GPUs)`."""
    if coverage.get("state") != "checked":
        why = "no target GPUs" if not targets_label and coverage.get("why") == "not tested" else coverage.get("why")
        return f"not checked ({why})"
    gpus = coverage.get("gpus") or {}
    parts = [f"native: {_named(coverage['native'], gpus)}" if coverage.get("native") else "native: no target GPU"]
    if coverage.get("ptx_jit"):
        parts.append(f"PTX JIT only: {_named(coverage['ptx_jit'], gpus)}")
    if coverage.get("none"):
        parts.append(f"no code: {_named(coverage['none'], gpus)}")
    return " · ".join(parts)


def describe_audit(summary: dict[str, Any] | None, image_id: str | None) -> str:
    """One cell of an audit summary (record/audits.audit_summary): `security fixes 2 · Python 1 (audited
    2026-12-05)`; "not checked" without an audit of exactly `image_id`, and for a half no source was consulted."""
    if not summary or not image_id or summary.get("image_id") != image_id:
        return "not checked"

    def n(value: object) -> str:
        return "not checked" if value is None else str(value)

    text = f"security fixes {n(summary.get('security_fixes'))} · Python {n(summary.get('python'))}"
    if summary.get("violations"):
        text += f" ({summary['violations']} violating the policy)"
    return text + f" (audited {str(summary.get('at') or '?')[:10]})"
