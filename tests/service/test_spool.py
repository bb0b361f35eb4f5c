"""service/worker/spool.py: log entries shared between workers through local files."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from service.worker import spool


@pytest.fixture
def tmp_spool(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(spool, "_swept", set())
    return tmp_path / "slidingwindow-spool"


def test_an_entry_is_found_by_the_token_it_applies_to(tmp_spool):
    sid = spool.spool_id("/ck/a")
    assert sid == spool.spool_id("/ck/a") != spool.spool_id("/ck/b")
    assert spool.put(sid, "payments", 3, "7/2", "8/0", b"entry\nwith newline")
    assert spool.get(sid, "payments", 3, "7/2") == ("8/0", b"entry\nwith newline")
    assert spool.get(sid, "payments", 3, "8/0") is None  # nothing applies to the newest token yet
    assert spool.get(sid, "payments", 2, "7/2") is None  # another task


def test_old_entries_and_abandoned_queries_are_removed(tmp_spool):
    old = time.time() - spool.KEEP_SECONDS - 60
    spool.put("gone", "t", 0, "1/0", "2/0", b"x")  # a query that stopped long ago
    spool.put("live", "t", 0, "1/0", "2/0", b"x")
    for sid in ("gone", "live"):
        os.utime(spool.spool_dir(sid, "t", 0) / "1~0", (old, old))
    spool._swept.clear()  # a new worker process
    spool.put("live", "t", 0, "2/0", "3/0", b"y")
    assert not (tmp_spool / "gone").exists()
    assert spool.get("live", "t", 0, "1/0") is None
    assert spool.get("live", "t", 0, "2/0") == ("3/0", b"y")


def test_an_unwritable_spool_is_a_warning_not_an_error(tmp_spool, caplog, monkeypatch):
    monkeypatch.setattr(spool, "_warned", False)
    tmp_spool.parent.mkdir(parents=True, exist_ok=True)
    tmp_spool.write_text("a file where the directory should be")
    assert spool.put("q", "t", 0, "1/0", "2/0", b"x") is False
    assert spool.put("q", "t", 0, "2/0", "3/0", b"x") is False
    assert spool.get("q", "t", 0, "1/0") is None
    warnings = [r for r in caplog.records if "cannot share state log entries" in r.getMessage()]
    assert len(warnings) == 1  # once per process


def test_a_directory_swept_away_by_another_worker_is_made_again(tmp_spool, monkeypatch):
    from pathlib import Path

    real = Path.write_bytes
    calls = []

    def racing_write(self, data):  # the other worker's sweep removes the empty directory after our mkdir
        calls.append(self)
        if len(calls) == 1:
            self.parent.rmdir()
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", racing_write)
    assert spool.put("q", "t", 0, "1/0", "2/0", b"x")
    assert len(calls) == 2
    assert spool.get("q", "t", 0, "1/0") == ("2/0", b"x")


def test_a_query_directory_another_worker_sweeps_away_meanwhile_is_skipped(tmp_spool, caplog, monkeypatch):
    """Two workers' first writes sweep at once: a directory listed by one may be gone when it looks inside.
    The entry is written all the same and nothing is reported (it used to warn and return False)."""
    from pathlib import Path

    monkeypatch.setattr(spool, "_warned", False)
    spool.put("other", "t", 0, "1/0", "2/0", b"x")
    spool._swept.clear()  # a new worker process
    real = Path.iterdir

    def listing_with_a_vanished_query(self):
        entries = list(real(self))
        return [*entries, self / "removed-meanwhile"] if self == tmp_spool else entries

    monkeypatch.setattr(Path, "iterdir", listing_with_a_vanished_query)
    monkeypatch.setattr(Path, "is_dir", lambda self: self.name == "removed-meanwhile" or os.path.isdir(self))
    assert spool.put("q", "t", 0, "1/0", "2/0", b"y") is True
    assert spool.get("q", "t", 0, "1/0") == ("2/0", b"y")
    assert not [r for r in caplog.records if "cannot share" in r.getMessage()]
