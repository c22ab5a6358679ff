"""scripts/docs.py: the generated command reference and the link check, on a good and a bad case each."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imagebuild_docs_script", ROOT / "scripts" / "docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_reference_is_current_and_lists_every_command() -> None:
    docs = _docs()
    text = docs.render_commands()
    assert (ROOT / "docs" / "commands.md").read_text(encoding="utf-8") == text
    from imagebuild.cli import COMMANDS

    for name in COMMANDS:
        assert f"## imagebuild {name}\n" in text


def test_link_check_accepts_files_and_anchors(tmp_path: Path) -> None:
    docs = _docs()
    (tmp_path / "b.md").write_text("# Title\n\n## Exit codes\n\n```text\n# not a heading\n```\n")
    a = tmp_path / "a.md"
    a.write_text("[b](b.md) [codes](b.md#exit-codes) [self](#top) [web](https://example.com/x)\n\n# Top\n")
    docs.ROOT = tmp_path
    assert docs.broken_links([a]) == []


def test_link_check_names_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    docs = _docs()
    docs.ROOT = tmp_path
    (tmp_path / "b.md").write_text("# Title\n```text\n# not-a-heading\n```\n")
    a = tmp_path / "a.md"
    a.write_text("intro\n[gone](missing.md) [anchor](b.md#not-a-heading)\n")
    problems = docs.broken_links([a])
    assert problems == [
        "a.md:2: link to missing.md: no such file",
        "a.md:2: link to b.md#not-a-heading: no heading with anchor #not-a-heading",
    ]


def test_undocumented_matrix_keys_are_named() -> None:
    docs = _docs()
    assert docs.undocumented_keys((ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")) == []
    assert "torch" in docs.undocumented_keys("no keys here")
