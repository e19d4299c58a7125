"""
The active's replication gate (L{meshroute.ha.gate}): commit order, modes,
acknowledgements, batches shipped before their commit.
"""

import pytest

from meshroute.ha.gate import ALONE, HELD, REPLICATED, ReplicationGate
from meshroute.harules.quorum import LogPosition
from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.store.changes import ChangeBatch
from support.store_testing import ROUTER, msg


class RecordingSource:
    def __init__(self) -> None:
        self.appended: list = []
        self.head = LogPosition(1, 0)

    def append(self, batch) -> None:
        self.appended.append(batch)
        self.head = LogPosition(batch.epoch, batch.position)


def batch(position: int, epoch: int = 1) -> ChangeBatch:
    return ChangeBatch(epoch, position, (("DELETE FROM t", ()),))


def gate_and_fired(mode):
    source = RecordingSource()
    gate = ReplicationGate(source, 1, mode)
    fired: list = []
    return gate, source, fired


def commit(gate, fired, name, position=None):
    """
    A transaction, as the executor hands it over: a write prepared, then
    committed; a read (or a failure) only ended.
    """
    written = None if position is None else batch(position)
    if written is not None:
        gate.prepared(written)
    gate.committed(written, lambda: fired.append(name))


def test_alone_fires_at_once_and_hands_every_batch_to_the_source():
    gate, source, fired = gate_and_fired(ALONE)
    commit(gate, fired, "w1", 1)
    commit(gate, fired, "r")
    commit(gate, fired, "w2", 2)
    assert fired == ["w1", "r", "w2"]
    assert [b.position for b in source.appended] == [1, 2]


def test_replicated_fires_a_batch_when_the_backup_acknowledged_it():
    gate, source, fired = gate_and_fired(REPLICATED)
    commit(gate, fired, "w1", 1)
    commit(gate, fired, "w2", 2)
    commit(gate, fired, "w3", 3)
    assert fired == [] and gate.waiting == 3
    assert [b.position for b in source.appended] == [1, 2, 3]  # shipped at once
    gate.acknowledged(2)
    assert fired == ["w1", "w2"]
    gate.acknowledged(1)  # an older acknowledgement changes nothing
    assert fired == ["w1", "w2"] and gate.acknowledged_position == 2
    gate.acknowledged(3)
    assert fired == ["w1", "w2", "w3"] and gate.waiting == 0


def test_a_read_waits_behind_an_earlier_unacknowledged_write_and_fires_right_after_it():
    gate, _, fired = gate_and_fired(REPLICATED)
    commit(gate, fired, "r0")
    assert fired == ["r0"]  # nothing before it
    commit(gate, fired, "w1", 1)
    commit(gate, fired, "r1")
    commit(gate, fired, "failed")
    commit(gate, fired, "w2", 2)
    assert fired == ["r0"]
    gate.acknowledged(1)
    assert fired == ["r0", "w1", "r1", "failed"]


def test_held_fires_nothing_until_released_and_then_everything_in_order():
    gate, source, fired = gate_and_fired(REPLICATED)
    commit(gate, fired, "w1", 1)
    gate.hold_acknowledgements()
    assert gate.mode == HELD
    commit(gate, fired, "w2", 2)
    commit(gate, fired, "r")
    gate.acknowledged(2)  # held: even acknowledged batches wait
    assert fired == []
    assert [b.position for b in source.appended] == [1, 2]
    gate.run_alone()  # the voters recorded that the active runs alone
    assert fired == ["w1", "w2", "r"]
    commit(gate, fired, "w3", 3)
    assert fired[-1] == "w3"


def test_back_to_replicated_later_batches_wait_for_the_backup_again():
    gate, _, fired = gate_and_fired(ALONE)
    commit(gate, fired, "w1", 1)
    gate.run_replicated()
    commit(gate, fired, "w2", 2)
    assert fired == ["w1"]
    gate.acknowledged(2)
    assert fired == ["w1", "w2"]


def test_a_batch_is_shipped_when_prepared_and_fires_once_committed_and_acknowledged():
    """
    The backup may hold and acknowledge a batch before the active's own
    commit of it returns: its callers still wait for that commit.
    """
    gate, source, fired = gate_and_fired(REPLICATED)
    commit(gate, fired, "w1", 1)
    two = batch(2)
    gate.prepared(two)
    assert [b.position for b in source.appended] == [1, 2]
    assert gate.committed_head == LogPosition(1, 1)
    gate.acknowledged(2)
    assert fired == ["w1"]
    gate.committed(two, lambda: fired.append("w2"))
    assert fired == ["w1", "w2"] and gate.committed_head == LogPosition(1, 2)


def test_an_abandoned_batch_stops_the_gate_for_good():
    """
    The store could not commit a batch already shipped: the backup may
    hold what the store lacks, so nothing is confirmed any more, not even
    what was committed before it, whatever the mode and acknowledgements.
    """
    gate, source, fired = gate_and_fired(REPLICATED)
    commit(gate, fired, "w1", 1)
    two = batch(2)
    gate.prepared(two)
    gate.abandoned(two)
    gate.committed(None, lambda: fired.append("w2 failed"))
    gate.prepared(batch(3))
    gate.acknowledged(3)
    gate.run_alone()
    assert fired == [] and gate.failed
    assert [b.position for b in source.appended] == [1, 2]  # nothing shipped after
    assert gate.committed_head == LogPosition(1, 1)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError):
        ReplicationGate(RecordingSource(), 1, "sometimes")


def test_a_store_behind_a_replicated_gate_confirms_a_send_only_once_acknowledged(tmp_path):
    source = RecordingSource()
    gate = ReplicationGate(source, 7, ALONE)
    store = SQLiteStore(str(tmp_path / "store.db"), "normal", InlineExecutor(gate),
                        router=ROUTER)
    opened = []
    store.open().addCallback(opened.append)
    assert opened == [None]
    gate.run_replicated()
    sent, fetched = [], []
    store.accept(msg(1, dest_router=ROUTER)).addCallback(sent.append)
    store.fetch("q", 0, 10).addCallback(fetched.append)
    assert sent == [] and fetched == []
    (shipped,) = [b for b in source.appended if b.epoch == 7 and b.position > 1]
    gate.acknowledged(shipped.position)
    assert sent == [None]
    assert [m.msg_id for _, m, _ in fetched[0]] == ["m1"]
    store.close()
