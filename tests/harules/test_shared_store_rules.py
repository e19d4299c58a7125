"""
The rules of a shared-store pair (L{meshroute.harules.shared_store}):
the lock record's codec, who may take a free lock, the epoch of an
activation, failback, and the live's heartbeat watch.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshroute.harules import shared_store as rules
from meshroute.harules.settings import BACKUP, PRIMARY

records = st.builds(rules.LockRecord, st.sampled_from(rules.STATES),
                    st.sampled_from([PRIMARY, BACKUP, ""]),
                    st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))


@given(records)
def test_a_record_reads_back_as_written(record):
    assert rules.LockRecord.decode(record.encode()) == record
    assert len(record.encode()) == rules.RECORD_SIZE < rules.LIVE_LOCK_OFFSET


@given(st.binary(max_size=2 * rules.RECORD_SIZE))
def test_any_bytes_are_a_record_or_a_clear_error(data):
    try:
        rules.LockRecord.decode(data)
    except rules.BadLockRecord as e:
        assert str(e)


def test_a_new_file_has_not_started():
    assert rules.LockRecord.decode(b"") == rules.LockRecord()
    assert rules.LockRecord.decode(b"\0" * rules.RECORD_SIZE).state == rules.NOT_STARTED


def test_another_programs_file_is_refused():
    with pytest.raises(rules.BadLockRecord, match="not a meshroute"):
        rules.LockRecord.decode(b"x" * rules.RECORD_SIZE)


@pytest.mark.parametrize("state", rules.STATES)
@pytest.mark.parametrize("requested", [False, True])
def test_rule_2_a_primary_takes_a_free_lock_whatever_it_says(state, requested):
    assert rules.may_take(PRIMARY, rules.LockRecord(state, BACKUP, 3), requested)


def test_rule_3_a_backup_takes_over_a_crashed_or_handed_over_live():
    assert rules.may_take(BACKUP, rules.LockRecord(rules.LIVE, PRIMARY, 3), False)
    assert rules.may_take(BACKUP, rules.LockRecord(), False)


def test_rule_3_a_backup_leaves_a_paused_store_and_one_the_primary_asks_for():
    assert not rules.may_take(BACKUP, rules.LockRecord(rules.PAUSED, PRIMARY, 3), False)
    assert not rules.may_take(BACKUP, rules.LockRecord(rules.LIVE, PRIMARY, 3), True)


@given(st.integers(0, 2**40), st.integers(0, 2**40))
def test_rule_4_each_activation_serves_above_every_epoch_known(in_record, in_store):
    epoch = rules.next_epoch(rules.LockRecord(rules.LIVE, PRIMARY, in_record), in_store)
    assert epoch > in_record and epoch > in_store and epoch == max(in_record, in_store) + 1


def test_rule_5_only_a_backup_allowing_failback_hands_back_on_request():
    assert rules.hands_back(BACKUP, True, True)
    assert not rules.hands_back(BACKUP, True, False)
    assert not rules.hands_back(BACKUP, False, True)
    assert not rules.hands_back(PRIMARY, True, True)


def test_rule_6_a_live_is_unresponsive_after_a_lease_without_a_new_heartbeat():
    watch = rules.HeartbeatWatch(lease_timeout=3.0)
    assert not watch.unresponsive(0.0) and watch.silent_for(0.0) is None
    watch.saw(7, 10.0)
    watch.saw(7, 12.9)
    assert not watch.unresponsive(12.9)
    assert watch.unresponsive(13.0) and watch.silent_for(13.5) == 3.5
    watch.saw(8, 13.5)  # it woke and wrote again
    assert not watch.unresponsive(16.4) and watch.changed_at == 13.5
    watch.forget()
    assert not watch.unresponsive(100.0)
