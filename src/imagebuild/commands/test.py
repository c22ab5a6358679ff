"""`imagebuild test`: run the smoke suite inside built images (or any image) and report per check."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagebuild.commands._options import default_report_dir, only_option, registry_option, state_dir_option
from imagebuild.errors import EXIT_FAILED, EXIT_OK, UsageError


def parse_expect(values) -> dict[str, str]:
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
def command(matrix, image, only, expect, flavor, junit_dir, result_dir, require_gpu, perf, timeout, registry,
            state_dir, retest, json_out, report_dir):
    """Start each image, run the smoke suite in it, remove it; exit 1 when any check failed.

    \b
    Examples:
      imagebuild test --matrix images/cpu.yaml --junit out/junit
      imagebuild test --image registry/pytorch:2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime --expect torch=2.9.1
    """
    from imagebuild.smoke import runner

    if bool(matrix) == bool(image):
        raise UsageError("give exactly one of --matrix FILE or --image REF")
    expectations = parse_expect(expect)
    kwargs = dict(require_gpu=require_gpu, perf=perf, junit_dir=junit_dir, result_dir=result_dir or junit_dir,
                  timeout=timeout, echo=None if json_out else (lambda m: click.echo(m, err=True)))
    client = runner.docker_client()
    rows: list[tuple[str, dict]] = []
    if image:
        if only:
            raise UsageError("--only goes with --matrix")
        rows.append((image, runner.run_smoke(image, flavor, expectations, client=client, **kwargs)))
    else:
        from imagebuild import __version__
        from imagebuild.commands._state import locate, plan_registry, plan_with_record
        from imagebuild.commands._testing import test_planned
        from imagebuild.files import check_output_dir
        from imagebuild.models import ImageResult
        from imagebuild.plan.assemble import matching
        from imagebuild.record import now
        from imagebuild.record.store import state_dir as record_state_dir
        from imagebuild.record.update import fill_row
        from imagebuild.report import write_reports

        started = now()
        say = _say
        planned = plan_with_record(matrix, registry, None, say, state_dir)
        check_output_dir(report_dir or default_report_dir(planned.path), "--report-dir")
        check_output_dir(record_state_dir(state_dir), "--state-dir")
        images = matching(planned.plan, tuple(only))
        if not images:
            raise UsageError(f"--only {' '.join(only)}: matches no image of {planned.path}")
        located = [(img, *locate(client, img, planned.record)) for img in images]
        done = test_planned(client, located, planned.path, state_dir=state_dir, extra_expect=expectations,
                            retest=retest, **kwargs)
        results = []
        for (img, tests), (_, image_id, _why) in zip(done, located, strict=True):
            rows.append((img.tag, tests))
            row = fill_row(planned.record, img, ImageResult.of(img))
            row.image_id, row.tests = image_id or row.image_id, tests
            results.append(row)
        paths = write_reports(results, report_dir or default_report_dir(planned.path), planned.plan, run={
            "command": "test", "steps": ["test"], "registry": plan_registry(planned.plan),
            "started": started, "tool_version": __version__})
        say(f"report: {paths['md']}")
    if json_out:
        click.echo(json.dumps([{"image": ref, **t} for ref, t in rows], indent=2, default=str))
    else:
        click.echo(runner.summary_table(rows))
    return EXIT_FAILED if any(t.get("failed") for _, t in rows) else EXIT_OK
