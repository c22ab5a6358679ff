"""find_matrix: ./NAME, then ./images/NAME, then the shipped matrices; a miss lists what exists."""

from pathlib import Path

import pytest

from imagebuild.errors import MatrixError
from imagebuild.matrix import find as find_mod
from imagebuild.matrix import find_matrix

REPO_IMAGES = Path(__file__).resolve().parents[2] / "images"


def test_cwd_file_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100.yaml").write_text("name: x\n")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "h100.yaml").write_text("name: y\n")
    assert find_matrix("h100.yaml") == Path("h100.yaml")


def test_images_folder_next(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "h100.yaml").write_text("name: y\n")
    assert find_matrix("h100.yaml") == Path("images/h100.yaml")
    assert find_matrix("h100") == Path("images/h100.yaml")


def test_shipped_matrices_last(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = find_matrix("cpu.yaml")
    assert found.resolve() == (REPO_IMAGES / "cpu.yaml").resolve()


def test_packaged_images_dir_is_used(tmp_path, monkeypatch):
    packaged = tmp_path / "_images"
    packaged.mkdir()
    (packaged / "only-packaged.yaml").write_text("name: z\n")
    monkeypatch.setattr(find_mod, "shipped_dirs", lambda: [packaged])
    monkeypatch.chdir(tmp_path)
    assert find_matrix("only-packaged.yaml") == packaged / "only-packaged.yaml"


def test_missing_lists_available(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MatrixError) as err:
        find_matrix("h200.yaml")
    [p] = err.value.problems
    assert p.file == "h200.yaml" and "no such matrix file" in p.message
    assert p.choices == "available matrices: a100.yaml, cpu.yaml, gh200.yaml, h100.yaml"


def test_explicit_paths_are_not_searched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MatrixError):
        find_matrix("sub/h100.yaml")
    assert find_matrix(str(REPO_IMAGES / "h100.yaml")) == REPO_IMAGES / "h100.yaml"
