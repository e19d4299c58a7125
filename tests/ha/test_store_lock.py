"""
The lock file of a shared-store pair (L{meshroute.ha.store_lock}): two
instances, even in one process, never both hold the live lock; a
failback request lives as long as its holder; a commit batch finds a
lock released or a file replaced.
"""

import os

import pytest

from meshroute.ha.store_lock import StoreLock, StoreLockLost
from meshroute.harules.shared_store import LIVE, PAUSED, LockRecord


@pytest.fixture
def pair(tmp_path):
    one, other = StoreLock(str(tmp_path)), StoreLock(str(tmp_path))
    yield one, other
    for lock in (one, other):
        try:
            lock.close()
        except OSError:
            pass


def test_one_holder_at_a_time(pair):
    one, other = pair
    assert one.try_live() and one.try_live()
    assert not other.try_live() and other.live_held_elsewhere()
    assert not one.live_held_elsewhere()
    one.release_live()
    assert not other.live_held_elsewhere() and other.try_live()
    assert not one.try_live()


def test_closing_releases_the_lock_as_a_dead_process_does(pair):
    one, other = pair
    one.try_live()
    one.close()
    assert other.try_live()


def test_a_failback_request_lives_with_its_holder(pair):
    one, other = pair
    assert not other.failback_requested()
    assert one.request_failback() and other.failback_requested()
    assert not one.failback_requested()  # its own
    one.withdraw_failback()
    assert not other.failback_requested()
    one.request_failback()
    one.close()
    assert not other.failback_requested()


def test_the_record_is_shared(pair):
    one, other = pair
    assert other.read() == LockRecord()
    one.try_live()
    one.write(LockRecord(LIVE, "primary", 4, 10))
    one.write(LockRecord(PAUSED, "primary", 4, 11), durable=False)
    assert other.read() == LockRecord(PAUSED, "primary", 4, 11)


def test_a_commit_batch_needs_the_lock_on_the_files_own_path(pair, tmp_path):
    one, _ = pair
    with pytest.raises(StoreLockLost, match="released"):
        one.held()
    one.try_live()
    one.held()
    os.rename(one.path, str(tmp_path / "moved"))
    with pytest.raises(StoreLockLost, match="removed or replaced"):
        one.held()
    StoreLock(str(tmp_path)).close()  # a new file at the path
    with pytest.raises(StoreLockLost, match="removed or replaced"):
        one.held()
