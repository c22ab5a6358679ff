"""What one run of the pipeline is asked to do: ONE options object (RunOptions) that `build`, `test` and `push` fill
from their flags, with a part per step (BuildSettings, TestSettings, PushSettings; None: the step does not run).

Also the checks of option values that must fail before anything is planned (exit 2, one `error:` line), and where a
matrix's files go. Importing this module loads neither the engine SDK nor a stage: every command imports it, and
`imagebuild --help` loads every command.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from imagebuild.errors import UsageError
from imagebuild.files import FileProblem, certificate_blocks
from imagebuild.inputs import BuildInputs


class Step(str, Enum):
    """The steps a run took (the report's run.steps; `.value` is the word written)."""

    BUILD = "build"
    TEST = "test"
    PUSH = "push"


@dataclass(frozen=True)
class BuildSettings:
    force: bool = False
    jobs: int | None = None  # None: chosen for this machine (builder.options.default_jobs)
    keep_going: bool = False
    plain: bool = False
    verbose: bool = False
    log_dir: Path | None = None  # None: <report dir>/logs
    registry_cache: bool = True
    require_registry: bool = False
    sbom: bool = True
    locked: bool = False
    created: str | None = None
    security_refresh: bool = False  # rebuild the images the security suite has fixes for, and their children
    # the options only one backend understands (a row's RunOption.setting -> the value given; --builder NAME,
    # --buildkit-cache REPOSITORY): imagebuild/backends.py's table names them, commands/build.py makes their flags
    backend_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TestSettings:
    __test__ = False  # not a pytest class despite the name

    retest: bool = False
    require_gpu: bool = False
    perf: bool = False
    expect: dict[str, str] = field(default_factory=dict)  # --expect on top of the plan's own expectations
    timeout: float = 1800.0
    junit_dir: Path | None = None  # one JUnit XML per image
    result_dir: Path | None = None  # one JSON result per image
    quiet: bool = False  # --json: no progress lines
    sections: tuple[str, ...] | None = None  # --sections (test --image only): these probe sections, not the whole suite


@dataclass(frozen=True)
class PushSettings:
    require_tests: bool = True  # push only images whose content passed the suite
    retries: int | None = None  # None: push.DEFAULT_RETRIES
    ca_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    dry_run: bool = False
    layer_limit: int | None = None  # --layer-limit bytes (None: the matrix's layer_limit, else 8 GiB)
    sign_key: str | None = None  # a cosign key file or KMS URI: every pushed digest signed + SBOM/provenance attested
    sign_password: str | None = field(default=None, repr=False)  # the key file's; None: COSIGN_PASSWORD
    compression: str | None = None  # --compression zstd|gzip; None: the matrix's `compression`, else zstd


@dataclass(frozen=True)
class RunOptions:
    """One run: which matrix, which images, where its record and report live, and the steps to take."""

    command: Step  # the command the user ran (the report's run.command)
    matrix: str  # as given: a path or a bare name (find_matrix)
    registry: str | None = None  # None: the record's, else the matrix's
    inputs: BuildInputs | None = None  # None: plan with the inputs the record holds
    only: tuple[str, ...] = ()
    state_dir: str | None = None
    report_dir: Path | None = None  # None: reports/<matrix stem>/
    build: BuildSettings | None = None
    test: TestSettings | None = None
    push: PushSettings | None = None


def resolve_matrix_path(name: str) -> Path:
    from imagebuild.matrix import find_matrix

    return find_matrix(name)


def default_report_dir(matrix_path: str | Path) -> Path:
    """Each matrix has its own report folder, replaced by each run: reports/<matrix stem>/."""
    return Path("reports") / Path(matrix_path).stem


def check_created(value: str | None) -> str | None:
    """--created: 'now' or an RFC 3339 date (what the OCI label holds); anything else is a usage error."""
    if value is None or value == "now":
        return value
    from imagebuild.dates import parse_created

    if parse_created(value) is None:
        raise UsageError(f"--created {value!r}: not 'now' nor an RFC 3339 date such as 2026-01-31T12:00:00Z")
    return value


def check_inputs(inputs: BuildInputs) -> None:
    """Bad paths are input errors (exit 2) before anything is planned or built."""
    for ca in inputs.ca_certs:
        p = Path(ca)
        if not p.is_file():
            raise UsageError(f"--ca-cert {p}: no such file")
        try:
            certificate_blocks(p)  # only these reach an image; a file without one is refused here
        except FileProblem as exc:
            raise UsageError(f"--ca-cert {exc}") from None
    if inputs.wheelhouse is not None and not Path(inputs.wheelhouse).is_dir():
        raise UsageError(f"--wheelhouse {inputs.wheelhouse}: no such folder")


def require_lock(matrix: str, path: Path) -> None:
    """--locked: the lock must exist (make_plan then checks that it fits the matrix)."""
    from imagebuild.lock import LockError, lock_path

    lock = lock_path(path)
    if not lock.is_file():
        raise LockError(f"--locked: {lock} does not exist; `imagebuild lock --matrix {matrix}` writes it")
