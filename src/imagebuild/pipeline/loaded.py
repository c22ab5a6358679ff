"""The plan and the record of one run, loaded once.

Every command after `build` plans with the build's inputs from the record, so `plan`, `test`, `push`, `bake` show the
hash the image carries without the build's flags repeated; `build` plans with its own flags and records them. The
record is read and trust-checked here once per run (another schema or another matrix file: said on one line, then
ignored); the run's own writes go through RecordBook.update, which keeps the record it wrote, so no stage reads the
file again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from imagebuild.backends import AUTO, CLASSIC
from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan
from imagebuild.pipeline.settings import resolve_matrix_path
from imagebuild.plan import make_plan
from imagebuild.record import Record, load_record, updating

Say = Callable[[str], None]


class RecordBook:
    """The run's one view of the matrix's record: None until a trustworthy record exists."""

    def __init__(self, matrix_path: Path, state_dir: str | None, record: Record | None):
        self.matrix_path, self.state_dir, self.record = matrix_path, state_dir, record

    def update(self, change: Callable[[Record], object], inputs: BuildInputs | None = None,
               registry: str | None = None, replace_inputs: bool = False) -> None:
        """Read-modify-write under the record's lock (a parallel `push` keeps its update), then keep what was
        written as this run's record."""
        with updating(self.matrix_path, inputs, registry, directory=self.state_dir,
                      replace_inputs=replace_inputs) as rec:
            change(rec)
        self.record = rec


def trusted_record(path: Path, state_dir: str | None, say: Say) -> Record | None:
    """The matrix's record, or None when there is none or it must not be trusted (said on one line)."""
    rec = load_record(path, state_dir)
    if rec is not None and rec.problem:
        say(f"warning: {rec.problem}")
        return None
    return rec


def same_inputs(recorded: dict[str, object], given: BuildInputs) -> bool:
    """Whether a record's inputs are `given`'s. A record written before the backend was recorded (no `backend`)
    was built with the classic builder, so it is the same as a build that resolved auto to classic."""
    public = given.public()
    if "backend" not in recorded and public.get("backend") == CLASSIC:
        del public["backend"]
    return recorded == public


@dataclass
class Loaded:
    path: Path  # the matrix file
    plan: Plan
    book: RecordBook
    inputs: BuildInputs  # what the plan was made with
    registry: str | None

    @property
    def record(self) -> Record | None:
        return self.book.record


def load(matrix: str, registry: str | None, inputs: BuildInputs | None, state_dir: str | None, say: Say, *,
         building: bool = False) -> Loaded:
    """Plan `matrix` with the given build-input flags, else with the inputs its record says the images were built
    with (`building`: always with the flags given: the build records them). Flags that differ from the record's are
    said (the plan then describes other images than the record). A lock that does not fit the matrix: LockError."""
    path = resolve_matrix_path(matrix)
    rec = trusted_record(path, state_dir, say)
    given = inputs if inputs is not None else BuildInputs()
    if not building and given.backend == AUTO:  # only a build resolves auto; the others plan as the record says
        given = replace(given, backend=None)
    carried = rec.build_inputs().security_refresh if rec is not None else ()
    if carried and not given.security_refresh and (building or given != BuildInputs()):
        # an earlier build --security-refresh stays part of these images' inputs (pipeline/staleness.py): without it
        # their hashes would fall back to the pre-refresh layers
        given = replace(given, security_refresh=carried)
        if building:
            say(f"note: keeping the security refresh recorded for {', '.join(r.image for r in carried)}")
    if building:
        if rec is not None and not same_inputs(rec.inputs, given):
            recorded = rec.build_inputs().security_refresh
            if same_inputs(rec.inputs, replace(given, security_refresh=recorded)):  # build --security-refresh
                new = sorted(r.image for r in given.security_refresh if r not in recorded)
                say(f"note: this build adds a security refresh of {', '.join(new)} to the recorded inputs")
            else:
                say(f"note: {rec.path} recorded a build with other inputs ({rec.describe_inputs()}); this build "
                    "records its own")
        use = given
    elif given != BuildInputs():
        if rec is not None and not same_inputs(rec.inputs, given):
            say(f"note: {rec.path} records a build with other inputs ({rec.describe_inputs()}); planning with "
                "the flags given")
        use = given
    elif rec is not None:
        use = rec.build_inputs()
        if use != BuildInputs():
            say(f"inputs from {rec.path}: {rec.describe_inputs()}")
    else:
        use = BuildInputs()
    if registry is None and rec is not None and not building:
        registry = rec.registry
    return Loaded(path, make_plan(path, use, registry), RecordBook(path, state_dir, rec), use, registry)
