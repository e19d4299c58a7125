"""
The store's HA voter records (L{IVoterRecords}, schema versions 4 and 9),
through both executors: saved, replaced, and still there after the store
is closed and opened again, so that a witness restarted on its store
votes as it did before.
"""

import sqlite3

import pytest_twisted
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from meshroute.events import EventLog
from meshroute.harules.quorum import STALE_EPOCH, LogPosition, VoterRecord
from meshroute.interfaces import IVoterRecords
from meshroute.wire import frames
from meshroute.router.witness import Witness
from support.store_testing import LATEST_SCHEMA, Opener, rewind_schema
from support.store_testing import opener  # noqa: F401 (the fixture)

GRANTED = VoterRecord(7, "router-b/backup", LogPosition(6, 120), LogPosition(7, 0))
LEARNED = VoterRecord(8, "router-b/primary", LogPosition(7, 30), LogPosition(7, 30), learned=True)


@pytest_twisted.ensureDeferred
async def test_a_new_store_has_no_records(opener):  # noqa: F811
    store = await opener.open()
    assert verifyObject(IVoterRecords, store)
    assert await store.voter_records() == {}


@pytest_twisted.ensureDeferred
async def test_records_survive_reopening(opener):  # noqa: F811
    store = await opener.open()
    await store.save_voter_record("router-b", VoterRecord(), 3000)
    await store.save_voter_record("router-b", GRANTED, 4000)
    await store.save_voter_record("router-c", VoterRecord(1, "router-c/primary"), 3000)
    await store.save_voter_record("router-d", LEARNED, 3000)
    store = await opener.reopen(store)
    assert await store.voter_records() == {
        "router-b": (GRANTED, 4000),
        "router-c": (VoterRecord(1, "router-c/primary"), 3000),
        "router-d": (LEARNED, 3000),
    }


@pytest_twisted.ensureDeferred
async def test_the_upgrade_from_version_3_adds_the_table_and_keeps_the_data(opener):  # noqa: F811
    store = await opener.open()
    await store.close()
    with sqlite3.connect(store.path) as connection:
        rewind_schema(connection, 3)
    store = await opener.open()
    assert store.applied_versions == list(range(4, LATEST_SCHEMA + 1))
    await store.save_voter_record("router-b", GRANTED, 3000)
    assert await store.voter_records() == {"router-b": (GRANTED, 3000)}


@pytest_twisted.ensureDeferred
async def test_the_upgrade_from_version_9_reads_old_records_as_granted(opener):  # noqa: F811
    store = await opener.open()
    await store.save_voter_record("router-b", GRANTED, 3000)
    await store.close()
    with sqlite3.connect(store.path) as connection:
        rewind_schema(connection, 9)
    store = await opener.open()
    assert store.applied_versions == list(range(10, LATEST_SCHEMA + 1))
    assert await store.voter_records() == {"router-b": (GRANTED, 3000)}


@pytest_twisted.ensureDeferred
async def test_a_restarted_witness_still_refuses_an_epoch_it_only_learned(opener,  # noqa: F811
                                                                          tmp_path):
    """
    The witness granted epoch 4 to the primary; the backup won epoch 4
    with the other voters' grants (the primary handed over to it) and its
    heartbeat taught the witness so.  The hand-over's request, arriving
    late, is refused: the witness would have granted epoch 4 twice.  That
    it never granted the backup epoch 4 is in its record on disk, so it
    refuses it after a restart on the same store as well.
    """
    clock = Clock()
    event_log = EventLog(str(tmp_path / "events.log"), "router-w", clock)

    async def witness_on(store) -> Witness:
        witness = Witness("router-w", store, clock, event_log)
        await witness.load()
        return witness

    def ask(witness: Witness, candidate: str, requester: str):
        return witness.vote("router-b", frames.VoteRequest(
            "router-b", candidate, requester, 4, 0, 0, False, 3000))

    store = await opener.open()
    witness = await witness_on(store)
    assert (await ask(witness, "router-b/primary", "router-b/primary")).granted
    heard = await witness.heartbeat("router-b", frames.Heartbeat(
        "router-b", "router-b/backup", 4, 4, 0, 4, 0, 1.0, 3000))
    assert heard.accepted
    assert (await ask(witness, "router-b/backup", "router-b/primary")).reason == STALE_EPOCH
    restarted = await witness_on(await opener.reopen(store))
    assert restarted.records()["router-b"].learned
    assert (await ask(restarted, "router-b/backup", "router-b/primary")).reason == STALE_EPOCH
