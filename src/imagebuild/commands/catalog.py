"""`imagebuild catalog`: a Markdown (or JSON) table of every tag and alias of a matrix as its registry serves them."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

import click

from imagebuild.commands._options import matrix_option, registry_option, state_dir_option
from imagebuild.errors import EXIT_OK, UsageError
from imagebuild.files import check_output_file, write_text_atomic
from imagebuild.oci import Reference, RegistryClient, read_password_stdin, resolve_auth


@click.command("catalog")
@matrix_option
@registry_option
@click.option("--username", "-u", default=None, metavar="USER",
              help="Registry user; the password comes from --password-stdin or IMAGEBUILD_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="CA certificate of a TLS registry (default: /etc/docker/certs.d/<registry>/ca.crt).")
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Write JSON instead of Markdown.")
@click.option("--output", "-o", default=None, type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Write here (replaced only once the whole catalog is read) instead of standard output.")
def command(matrix: str, registry: str | None, username: str | None, password_stdin: bool, ca_file: str | None,
            state_dir: str | None, as_json: bool, output: str | None) -> int:
    """Write the catalog of a matrix's images: for every tag and alias of its plan the torch, CUDA, cuDNN, NCCL,
    Python, OS and TE versions, flavor, compressed and unpacked size, digest, smoke result, where the smoke test ran
    (CPU host or GPU model) and the build date; per platform image, the target GPUs its CUDA code runs natively or
    only through PTX JIT (its latest test's coverage check), the driver floor, and its last audit's counts
    (security fixes, Python advisories) — "not checked" where they were not read.

    Read through the registry API (manifests and image configs with their labels; no image is pulled) and from the
    matrix's record (.imagebuild/<matrix>.state.json: smoke results and unpacked sizes, matched on the image ID);
    tags the registry lacks are listed as not pushed. The registry is --registry, else the one the record's build
    used, else the matrix's. Meant to be the registry's README.

    \b
    Credentials as for `imagebuild push`: --username U --password-stdin, IMAGEBUILD_REGISTRY_USER +
    IMAGEBUILD_REGISTRY_PASSWORD, or `docker login`.

    \b
    Example:
      imagebuild catalog --matrix images/h100.yaml -o CATALOG.md
      imagebuild catalog -m cpu.yaml --registry 127.0.0.1:5000/ml --json
    """
    from imagebuild.catalog import Header, collect, render_json, render_markdown
    from imagebuild.pipeline.loaded import load
    from imagebuild.record import record_path

    if password_stdin and not username:
        raise UsageError("--password-stdin needs --username")
    if output and not Path(output).resolve().parent.is_dir():
        raise UsageError(f"-o {output}: directory {Path(output).resolve().parent} does not exist")
    if output:
        check_output_file(output, "-o")  # before the registry is asked anything
    password = read_password_stdin(sys.stdin) if password_stdin else None
    # tags do not depend on the build inputs; the record only gives the registry its build used (and says when it
    # cannot be trusted)
    planned = load(matrix, registry, None, state_dir, lambda m: click.echo(m, err=True) if
                   m.startswith("warning") else None)
    path, plan, registry = planned.path, planned.plan, planned.registry
    prefixes = sorted({(img.variant.registry if registry is None else registry).rstrip("/") for img in plan.images})
    if not plan.images or "" in prefixes:
        raise UsageError(f"{path}: the plan's tags name no registry (matrix `registry` is empty); "
                         "give --registry HOST[:PORT]/PATH")

    clients: dict[str, RegistryClient] = {}

    def reader_for(host: str) -> RegistryClient:
        if host not in clients:
            auth = resolve_auth(host, username=username, password=password)
            client = RegistryClient(auth, ca_file=ca_file, retries=2)
            # fail early (one `error:` line, the registry's own words) before any row is read
            repo = next(r.repository for r in (Reference.parse(i.tag) for i in plan.images) if r.registry == host)
            client.check_auth(repo, "pull")
            click.echo(f"catalog: credentials {auth.describe()}", err=True)
            clients[host] = client
        return clients[host]

    record = record_path(path, state_dir)
    entries = collect(plan, reader_for, record)
    header = Header(matrix=str(matrix), registry=", ".join(prefixes),
                    repositories=tuple(dict.fromkeys(img.repository for img in plan.images)),
                    generated_at=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    record=str(record))
    text = render_json(entries, header) if as_json else render_markdown(entries, header)
    if output:
        try:  # by rename: a link at the name is replaced, never written through
            write_text_atomic(Path(output), text)
        except OSError as exc:
            raise UsageError(f"-o {output}: cannot write the catalog ({exc.strerror or exc})") from None
        missing = sum(1 for e in entries if not e.pushed)
        click.echo(f"catalog: {len(entries)} tags and aliases ({missing} not pushed) -> {output}", err=True)
    else:
        click.echo(text, nl=False)
    return EXIT_OK
