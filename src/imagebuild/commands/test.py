"""`imagebuild test`: run the smoke suite inside built images (or any image) and report per check."""

from __future__ import annotations

import json
from pathlib import Path

import click

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


def _result_row(client, img, tests: dict):
    """The report row of one tested image: the image ID tested, so a later rebuild invalidates these results."""
    from imagebuild.models import ImageResult

    inputs_hash = img.inputs_hash
    try:
        info = client.api.inspect_image(img.tag)
        image_id = info["Id"]
        # the hash the image was built with (this plan has no --ca-cert/--wheelhouse, so its hash may differ)
        inputs_hash = ((info.get("Config") or {}).get("Labels") or {}).get("io.imagebuild.inputs-hash") or inputs_hash
    except Exception:  # not built: the smoke run already reported it as a failed check
        image_id = None
    row = ImageResult.of(img)
    row.inputs_hash, row.image_id, row.tests = inputs_hash, image_id, tests
    return row


@click.command("test")
@click.option("--matrix", "matrix", type=str, help="matrix file (name or path): test its planned images by tag")
@click.option("--image", "image", type=str, help="test one image someone already has (tag, reference or ID)")
@click.option("--only", help="with --matrix: only images whose id/tag/variant/flavor matches (glob or substring)")
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
@click.option("--registry", default=None, help="with --matrix: registry prefix the plan's tags carry")
@click.option("--json", "json_out", is_flag=True, help="print the results as JSON instead of a table")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="with --matrix: merge the results into build-report.json/.md here")
def command(matrix, image, only, expect, flavor, junit_dir, result_dir, require_gpu, perf, timeout, registry,
            json_out, report_dir):
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
    kwargs["client"] = client
    rows: list[tuple[str, dict]] = []
    if image:
        if only:
            raise UsageError("--only goes with --matrix")
        rows.append((image, runner.run_smoke(image, flavor, expectations, **kwargs)))
    else:
        from imagebuild.commands._options import resolve_matrix_path
        from imagebuild.inputs import BuildInputs
        from imagebuild.plan import make_plan

        path = resolve_matrix_path(matrix)
        plan = make_plan(path, BuildInputs(), registry)
        images = [i for i in plan.images if not only or runner.matches(i, only)]
        if not images:
            raise UsageError(f"--only {only!r} matches no image of {path}")
        results = []
        for img in images:
            exp = dict(runner.expectations_for(img), **expectations)
            tests = runner.run_smoke(img.tag, img.flavor, exp, label=img.tag, **kwargs)
            rows.append((img.tag, tests))
            results.append(_result_row(client, img, tests))
        from imagebuild.report import write_reports

        write_reports(results, report_dir, plan)
    if json_out:
        click.echo(json.dumps([{"image": ref, **t} for ref, t in rows], indent=2, default=str))
    else:
        click.echo(runner.summary_table(rows))
    return EXIT_FAILED if any(t.get("failed") for _, t in rows) else EXIT_OK
