"""Atomic folder writes: readers see the old folder or the new one, never a half-written one."""

from __future__ import annotations

import pytest

from embedkit.storage import atomic_folder


def test_atomic_folder_replaces_the_old_folder_on_success(tmp_path):
    target = tmp_path / "idx"
    with atomic_folder(target) as tmp:
        (tmp / "old").write_text("1")
    with atomic_folder(target) as tmp:
        assert not (target / "new").exists()  # nothing is visible before the block ends
        (tmp / "new").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_atomic_folder_keeps_the_old_folder_when_the_block_fails(tmp_path):
    target = tmp_path / "nested" / "idx"
    with atomic_folder(target) as tmp:
        (tmp / "old").write_text("1")
    with pytest.raises(RuntimeError), atomic_folder(target) as tmp:
        (tmp / "new").write_text("2")
        raise RuntimeError("the build failed")
    assert (target / "old").read_text() == "1" and not (target / "new").exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["idx"]  # no temporary folder left behind
