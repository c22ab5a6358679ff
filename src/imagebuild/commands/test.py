"""`imagebuild test`: run the smoke suite inside built images (or any image) and report per check."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import click

from imagebuild.commands._options import only_option, registry_option, state_dir_option
from imagebuild.errors import EXIT_FAILED, EXIT_OK, UsageError
from imagebuild.pipeline.settings import RunOptions, Step, TestSettings


def parse_expect(values: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in values:
        if "=" not in item:
            raise UsageError(f"--expect {item!r}: want KEY=VALUE (e.g. torch=2.9.1)")
        k, v = item.split("=", 1)
        if not k.strip():
            raise UsageError(f"--expect {item!r}: empty key")
        out[k.strip()] = v.strip()
    return out


def _say(msg: str) -> None:
    click.echo(msg, err=True)


@click.command("test")
@click.option("--matrix", "-m", "matrix", type=str, metavar="FILE",
              help="matrix file (name or path): test its planned images (the image IDs its record holds)")
@click.option("--image", "image", type=str, help="test one image someone already has (tag, reference or ID)")
@only_option
@click.option("--expect", "expect", multiple=True, metavar="KEY=VALUE",
              help="expected value (torch=2.9.1, cuda=12.8, os=ubuntu24.04, flavor=dev, user=ml, "
                   "perf_min.bf16_tflops=600); default: the image's io.imagebuild.* labels")
@click.option("--flavor", type=click.Choice(["base", "runtime", "dev"]), help="with --image: override the flavor")
@click.option("--sections", "sections", type=str, metavar="NAME[,NAME...]",
              help="with --image: only these probe sections and their checks (e.g. versions,compile); the result "
                   "says it is partial")
@click.option("--junit", "junit_dir", type=click.Path(file_okay=False), help="write JUnit XML per image here")
@click.option("--results", "result_dir", type=click.Path(file_okay=False),
              help="write a JSON result per image here (default: the --junit directory)")
@click.option("--require-gpu", is_flag=True, help="GPU checks that cannot run fail instead of being skipped")
@click.option("--perf", is_flag=True, help="run the performance probe (GPU GEMM TFLOP/s, NCCL bandwidth)")
@click.option("--timeout", type=float, default=1800.0, show_default=True, help="seconds per image")
@registry_option
@state_dir_option
@click.option("--retest", is_flag=True, help="Run the suite even where this image already passed it.")
@click.option("--json", "json_out", is_flag=True, help="print the results as JSON instead of a table")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="with --matrix: where this run's build-report.json/.md/junit.xml go (default reports/<matrix>)")
def command(matrix: str | None, image: str | None, only: tuple[str, ...], expect: tuple[str, ...], flavor: str | None,
            sections: str | None, junit_dir: str | None, result_dir: str | None, require_gpu: bool, perf: bool, timeout: float,
            registry: str | None, state_dir: str | None, retest: bool, json_out: bool,
            report_dir: Path | None) -> int:
    """Start each image, run the smoke suite in it, remove it; exit 1 when any check failed.

    \b
    Examples:
      imagebuild test --matrix images/cpu.yaml --junit out/junit
      imagebuild test --image registry/pytorch:2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime --expect torch=2.9.1
    """
    from imagebuild.pipeline import flow  # the engine SDK and the stages: not for --help

    if bool(matrix) == bool(image):
        raise UsageError("give exactly one of --matrix FILE or --image REF")
    if image and only:
        raise UsageError("--only goes with --matrix")
    only_sections = _sections(sections, bool(matrix))
    settings = TestSettings(retest=retest, require_gpu=require_gpu, perf=perf, expect=parse_expect(expect),
                            timeout=timeout, junit_dir=Path(junit_dir) if junit_dir else None,
                            result_dir=Path(cast(str, result_dir or junit_dir)) if (result_dir or junit_dir) else None,
                            quiet=json_out, sections=only_sections)
    if image:
        result = flow.test_image(image, flavor, settings, _say)
    else:
        # exactly one of --matrix/--image (checked above): here --matrix
        result = flow.test_run(RunOptions(command=Step.TEST, matrix=cast(str, matrix), registry=registry,
                                          only=tuple(only),
                                          state_dir=state_dir, report_dir=report_dir, test=settings), _say)
        _say(f"report: {result.report_md}")
    if json_out:
        click.echo(json.dumps([_json_row(ref, t) for ref, t in result.rows], indent=2, default=str))
    else:
        click.echo(flow.summary_table(result.rows))
    return EXIT_OK if result.ok else EXIT_FAILED


def _sections(value: str | None, matrix: bool) -> tuple[str, ...] | None:
    """`--sections a,b` as a tuple; an unknown name is one error line with the choices. Not with --matrix: the
    record keeps whole-suite verdicts only, and a partial run must never read as an image's pass."""
    if value is None:
        return None
    from imagebuild.smoke.sides import sections_problem

    if matrix:
        raise UsageError("--sections goes with --image: a --matrix run records each image's whole-suite verdict")
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    problem = sections_problem(names)
    if problem:
        raise UsageError(f"--sections {value!r}: {problem}")
    return names


def _json_row(ref: str, tests: dict[str, Any]) -> dict[str, Any]:
    """One --json row: `image` is the reference the user named (the tag under --matrix); the result's own `image`,
    what really ran (an image ID under --matrix: verification binds to bytes), stays as `image_id`."""
    row = dict(tests)
    ran = row.get("image")
    row["image"] = ref
    if ran and ran != ref:
        row.setdefault("image_id", ran)
    return row
