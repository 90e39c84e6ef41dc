"""Outputs that never lose data: folders swapped in whole, only over embedkit's own kind, under a real lock, with the
umask honoured."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from embedkit.errors import EmbedkitError
from embedkit.outputs import check_output_folder, recover, replace_folder
from embedkit.storage import OLD_MARK, read_lines, write_lines, write_text


def _index_folder(path: Path, marker: str = "old") -> Path:
    path.mkdir(parents=True)
    (path / "meta.json").write_text(json.dumps({"format": "embedkit.index/1"}))
    (path / "payload").write_text(marker)
    return path


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_replace_folder_swaps_in_a_new_index_only_with_overwrite(tmp_path):
    target = _index_folder(tmp_path / "idx")
    with pytest.raises(EmbedkitError, match="pass --overwrite"), replace_folder(target, "index") as tmp:
        (tmp / "payload").write_text("new")
    assert (target / "payload").read_text() == "old"
    with replace_folder(target, "index", overwrite=True) as tmp:
        assert (target / "payload").read_text() == "old"  # nothing is visible before the block ends
        (tmp / "meta.json").write_text(json.dumps({"format": "embedkit.index/1"}))
        (tmp / "payload").write_text("new")
    assert (target / "payload").read_text() == "new"
    assert _listing(tmp_path) == ["idx"]  # no temporary folder, no lock file left


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_embedkit_did_not_write_is_never_replaced(tmp_path, overwrite):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "ch1.tex").write_text("x")
    with pytest.raises(EmbedkitError, match="did not write"), replace_folder(thesis, "index", overwrite):
        pass
    embeddings = tmp_path / "emb"
    embeddings.mkdir()
    (embeddings / "manifest.json").write_text(json.dumps({"format": "embedkit.embeddings/1"}))
    with pytest.raises(EmbedkitError, match="embedkit embeddings, not an index"):
        check_output_folder(embeddings, "index", overwrite)
    assert (thesis / "ch1.tex").read_text() == "x" and _listing(tmp_path) == ["emb", "thesis"]


def test_files_links_and_empty_folders(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(EmbedkitError, match="is a file"):
        check_output_folder(tmp_path / "file", "index")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    with pytest.raises(EmbedkitError, match="symbolic link"):
        check_output_folder(tmp_path / "link", "index")
    with pytest.raises(EmbedkitError, match="is a file, so nothing"):
        check_output_folder(tmp_path / "file" / "idx", "index")
    (tmp_path / "empty").mkdir()
    with replace_folder(tmp_path / "empty", "index") as tmp:  # an empty folder is free
        (tmp / "payload").write_text("new")
    assert (tmp_path / "empty" / "payload").read_text() == "new"


def test_a_failed_build_keeps_the_old_folder_and_leaves_nothing_behind(tmp_path):
    target = _index_folder(tmp_path / "nested" / "idx")
    with pytest.raises(RuntimeError), replace_folder(target, "index", overwrite=True) as tmp:
        (tmp / "payload").write_text("new")
        raise RuntimeError("the build failed")
    assert (target / "payload").read_text() == "old"
    assert _listing(target.parent) == ["idx"]


def test_recover_restores_a_folder_moved_aside_and_deletes_temporaries(tmp_path):
    """What the two-rename fallback leaves when killed between its renames: the old folder beside the target."""
    _index_folder(tmp_path / f".idx{OLD_MARK}1234")
    (tmp_path / ".idx.embedkit-new.5678").mkdir()
    recover(tmp_path / "idx")
    assert (tmp_path / "idx" / "payload").read_text() == "old"
    assert _listing(tmp_path) == ["idx"]


def test_lines_are_split_on_newline_only(tmp_path):
    ids = ["a\u2028b", "c\x85d", "e"]
    write_lines(tmp_path / "docid", ids)
    assert read_lines(tmp_path / "docid") == ids
    (tmp_path / "no-final-newline").write_text("x\ny")
    assert read_lines(tmp_path / "no-final-newline") == ["x", "y"]


@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_outputs_honour_the_umask(tmp_path, umask, file_mode, dir_mode):
    old = os.umask(umask)
    try:
        write_text(tmp_path / "report.md", "x")
        with replace_folder(tmp_path / "idx", "index") as tmp:
            write_text(tmp / "meta.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "idx").stat().st_mode) == dir_mode
    assert stat.S_IMODE((tmp_path / "idx" / "meta.json").stat().st_mode) == file_mode


@pytest.mark.skipif(not hasattr(os, "setuid") or os.geteuid() != 0, reason="needs root to become another user")
def test_another_uid_can_read_an_index_written_under_umask_022():
    with tempfile.TemporaryDirectory(dir="/tmp") as shared:  # pytest's own folders are private to their user
        folder = Path(shared)
        folder.chmod(0o755)
        old = os.umask(0o022)
        try:
            with replace_folder(folder / "idx", "index") as tmp:
                write_text(tmp / "meta.json", '{"format": "embedkit.index/1"}')
        finally:
            os.umask(old)
        child = "import os, sys; os.setgid(65534); os.setuid(65534); print(open(sys.argv[1]).read())"
        read = subprocess.run(
            [sys.executable, "-c", child, str(folder / "idx" / "meta.json")], capture_output=True, text=True
        )
    assert read.returncode == 0, read.stderr
    assert "embedkit.index/1" in read.stdout


def test_the_lock_serialises_two_processes(tmp_path):
    """Two real processes take the lock on one output; their critical sections never overlap."""
    script = textwrap.dedent(
        """
        import sys, time
        from embedkit.outputs import output_lock
        with output_lock(sys.argv[1]):
            start = time.monotonic()
            time.sleep(1.0)
            print(start, time.monotonic())
        """
    )
    target = tmp_path / "idx"
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    spans = sorted(tuple(map(float, p.communicate(timeout=60)[0].split())) for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert spans[1][0] >= spans[0][1]  # the second started after the first had finished
    time.sleep(0.1)
    assert _listing(tmp_path) == []  # the lock file went with the last holder
