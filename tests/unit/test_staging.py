"""The staged publish: a folder or file appears whole at its target, or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flinkai.staging import StagingError, staged_dir, staged_file


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_staged_dir_publishes_a_new_folder(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "model"
    with staged_dir(target, mode=0o755) as stage:
        assert stage.path.parent == target.parent and stage.path.is_dir()
        assert not target.exists()  # nothing visible while it is built
        (stage.path / "inner").mkdir()
        (stage.path / "inner" / "w.bin").write_bytes(b"new")
    assert (target / "inner" / "w.bin").read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o755
    assert _hidden(target.parent) == []


def test_staged_dir_replaces_an_existing_folder(tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.bin").write_bytes(b"old")
    with staged_dir(target) as stage:
        (stage.path / "new.bin").write_bytes(b"new")
    assert sorted(p.name for p in target.iterdir()) == ["new.bin"]
    assert _hidden(tmp_path) == []  # the old folder moved aside was deleted


def test_staged_dir_failure_keeps_the_old_target(tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.bin").write_bytes(b"old")
    with pytest.raises(RuntimeError, match="half way"), staged_dir(target) as stage:
        (stage.path / "new.bin").write_bytes(b"partial")
        raise RuntimeError("half way")
    assert sorted(p.name for p in target.iterdir()) == ["old.bin"]
    assert (target / "old.bin").read_bytes() == b"old"
    assert _hidden(tmp_path) == []  # no staging folder left behind


def test_staged_dir_failure_before_rename_publishes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "model"

    def crash() -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"), staged_dir(target, before_rename=crash) as s:
        (s.path / "a").write_text("a")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_staged_dir_without_replace_refuses_a_full_target(tmp_path: Path) -> None:
    target = tmp_path / "v1"
    target.mkdir()
    (target / "keep").write_text("kept")
    with pytest.raises(StagingError, match="cannot move"), staged_dir(target, replace=False) as s:
        (s.path / "other").write_text("x")
    assert [p.name for p in target.iterdir()] == ["keep"]
    assert _hidden(tmp_path) == []


def test_staged_dir_target_named_inside_the_block_and_discard(tmp_path: Path) -> None:
    with staged_dir(parent=tmp_path, prefix=".tmp-") as stage:
        assert stage.path.name.startswith(".tmp-")
        (stage.path / "f").write_text("content")
        stage.target = tmp_path / "by-content"
    assert (tmp_path / "by-content" / "f").read_text() == "content"
    with staged_dir(parent=tmp_path, prefix=".tmp-") as stage:
        (stage.path / "f").write_text("dup")
        stage.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by-content"]
    with pytest.raises(ValueError, match="no target"), staged_dir(parent=tmp_path):
        pass
    with pytest.raises(ValueError, match="not beside"), staged_dir(parent=tmp_path) as stage:
        stage.target = tmp_path / "elsewhere" / "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by-content"]
    with pytest.raises(ValueError, match="exactly one"), staged_dir():
        pass


def test_staged_file_replaces_atomically(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_text("old")
    with staged_file(target) as stage:
        stage.path.write_text("new")
        assert target.read_text() == "old"
    assert target.read_text() == "new"
    assert _hidden(tmp_path) == []


def test_staged_file_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "CURRENT"
    target.write_text("old")
    with pytest.raises(KeyError), staged_file(target, name="CURRENT.tmp") as stage:
        assert stage.path == tmp_path / "CURRENT.tmp"
        stage.path.write_text("half")
        raise KeyError("boom")
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["CURRENT"]
    with pytest.raises(StagingError, match="nothing was written"), staged_file(target):
        pass
    assert target.read_text() == "old"
