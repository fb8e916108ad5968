"""A follower truncates its Raft log only from the first conflicting entry (Raft §5.3): a stale or repeated
AppendEntries carrying fewer entries must not remove entries the follower already holds and acknowledged."""

import socket

import pytest
from pysyncobj import SyncObj, SyncObjConf

from freshet.controller import node


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def follower():
    conf = SyncObjConf(autoTick=False, dynamicMembershipChange=False)
    sync = SyncObj(f"127.0.0.1:{_port()}", [f"127.0.0.1:{_port()}"], conf=conf)
    yield sync
    sync.destroy()


def _feed(sync, **message):
    leader = next(iter(sync._SyncObj__otherNodes))
    sync._SyncObj__transport._onMessageReceivedCallback(leader, {"type": "append_entries", **message})


def _log(sync):
    return [(idx, term) for _cmd, idx, term in sync._SyncObj__raftLog[:]]


def test_stale_append_entries_keeps_acknowledged_entries(follower):
    node.guard_append_entries(follower)
    base = _log(follower)[-1]
    _feed(follower, term=1, commit_index=0, prevLogIdx=base[0], prevLogTerm=base[1],
          entries=[(b"a", base[0] + 1, 1), (b"b", base[0] + 2, 1)])
    assert _log(follower)[-2:] == [(base[0] + 1, 1), (base[0] + 2, 1)]
    # the same leader's older message, delivered late (or resent from a nextIndex moved back): fewer entries
    _feed(follower, term=1, commit_index=0, prevLogIdx=base[0], prevLogTerm=base[1], entries=[(b"a", base[0] + 1, 1)])
    assert _log(follower)[-2:] == [(base[0] + 1, 1), (base[0] + 2, 1)]


def test_unguarded_pysyncobj_drops_them(follower):
    """Documents the bug the guard exists for (fails once pysyncobj keeps §5.3 itself: then drop the guard)."""
    base = _log(follower)[-1]
    _feed(follower, term=1, commit_index=0, prevLogIdx=base[0], prevLogTerm=base[1],
          entries=[(b"a", base[0] + 1, 1), (b"b", base[0] + 2, 1)])
    _feed(follower, term=1, commit_index=0, prevLogIdx=base[0], prevLogTerm=base[1], entries=[(b"a", base[0] + 1, 1)])
    assert _log(follower)[-1] == (base[0] + 1, 1)


def test_conflicting_entry_truncates_from_there_and_commit_is_capped(follower):
    node.guard_append_entries(follower)
    base = _log(follower)[-1]
    _feed(follower, term=1, commit_index=0, prevLogIdx=base[0], prevLogTerm=base[1],
          entries=[(b"a", base[0] + 1, 1), (b"b", base[0] + 2, 1), (b"c", base[0] + 3, 1)])
    # a new leader (term 2) keeps entry +1 and replaces +2; +3 (term 1) is not vouched for by this message
    _feed(follower, term=2, commit_index=base[0] + 3, prevLogIdx=base[0], prevLogTerm=base[1],
          entries=[(b"a", base[0] + 1, 1), (b"B", base[0] + 2, 2)])
    assert _log(follower)[-2:] == [(base[0] + 1, 1), (base[0] + 2, 2)]
    assert follower._SyncObj__raftCommitIndex == base[0] + 2
    # entries all held, one more after them: kept, and the commit index stops at the message's last entry
    _feed(follower, term=2, commit_index=0, prevLogIdx=base[0] + 2, prevLogTerm=2, entries=[(b"c2", base[0] + 3, 2)])
    _feed(follower, term=2, commit_index=base[0] + 3, prevLogIdx=base[0], prevLogTerm=base[1],
          entries=[(b"a", base[0] + 1, 1)])
    assert _log(follower)[-1] == (base[0] + 3, 2)
    assert follower._SyncObj__raftCommitIndex == base[0] + 2
