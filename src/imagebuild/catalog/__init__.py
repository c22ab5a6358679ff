"""A registry's catalog of a matrix: every tag and alias of the plan with its versions, sizes, digest and smoke
result, read through the registry API (manifests and image configs, never a layer) and the local build record.

    from imagebuild.catalog import collect, render_markdown, Header
    entries = collect(plan, reader_for=lambda registry: RegistryClient(resolve_auth(registry)),
                      record_path=Path("reports/build-report.json"))
    print(render_markdown(entries, Header(...)))
"""

from imagebuild.catalog.collect import Entry, RegistryReader, collect, ran_on
from imagebuild.catalog.markdown import Header, render_json, render_markdown
from imagebuild.catalog.records import LocalRecord, local_record

__all__ = ["Entry", "Header", "LocalRecord", "RegistryReader", "collect", "local_record", "ran_on", "render_json",
           "render_markdown"]
