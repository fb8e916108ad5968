"""The controller's Raft journal is synced before Raft goes on: entries msync'd, term and vote fsync'd."""

import os

from pysyncobj.journal import createJournal

from freshet.controller import node


def spy(monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(node.os, "fsync", fsync)
    return synced


def test_entries_are_flushed_and_term_and_vote_fsynced(tmp_path, monkeypatch):
    inner = createJournal(str(tmp_path / "raft.journal"))
    flushes = []
    real_flush = inner.flush
    monkeypatch.setattr(inner, "flush", lambda: (flushes.append(1), real_flush()))
    synced = spy(monkeypatch)
    journal = node.DurableJournal(inner, str(tmp_path / "raft.snapshot"))
    flushes.clear()
    synced.clear()

    journal.add(b"cmd", 1, 1)
    assert flushes == [1] and len(journal) == 1 and journal[0] == (b"cmd", 1, 1)
    journal.add(b"cmd2", 2, 1)
    journal.deleteEntriesFrom(1)
    assert len(flushes) == 3 and len(journal) == 1

    journal.setCurrentTerm(5, "127.0.0.1:1")
    assert str(tmp_path / "raft.journal.meta") in synced and str(tmp_path) in synced
    assert journal.getCurrentTerm() == 5

    (tmp_path / "raft.snapshot").write_bytes(b"dump")
    synced.clear()
    journal.deleteEntriesTo(1)
    assert synced[0] == str(tmp_path / "raft.snapshot") and len(journal) == 0
