"""Reports of build -> test -> push runs: build-report.json of one run per matrix (+ history.jsonl), build-report.md, JUnit XML; size budgets.

    from imagebuild.report import write_reports, check_size_budget
    write_reports(results, "reports/cpu", plan, run)  # after build, test or push
    msg = check_size_budget(result, budget_bytes)  # None or a failure naming the largest layers
"""

from typing import TYPE_CHECKING

from imagebuild.report.budget import check_size_budget, describe_step, largest_layers
from imagebuild.report.writer import (
    JSON_NAME,
    JUNIT_NAME,
    MD_NAME,
    load_report,
    refresh_audits,
    render_junit,
    render_markdown,
    rerender,
    row_to_result,
    write_reports,
)
from imagebuild.units import format_size  # budget.py's own import of it (not re-exported there)

if TYPE_CHECKING:
    from imagebuild.matrix.schema import parse_size  # the one size grammar (matrix `size_budget`)


def __getattr__(name: str) -> object:
    if name == "parse_size":  # loaded when asked for: writing a report (every build) needs no matrix package
        from imagebuild.matrix.schema import parse_size

        return parse_size
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "JSON_NAME", "JUNIT_NAME", "MD_NAME", "check_size_budget", "describe_step", "format_size", "largest_layers",
    "load_report", "parse_size", "refresh_audits", "render_junit", "render_markdown", "rerender",
    "row_to_result", "write_reports",
]
