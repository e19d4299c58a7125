"""
The store's HA voter records (L{IVoterRecords}, schema version 4),
through both executors: saved, replaced, and still there after the store
is closed and opened again.
"""

import sqlite3

import pytest_twisted
from zope.interface.verify import verifyObject

from meshroute.ha.quorum import LogPosition, VoterRecord
from meshroute.interfaces import IVoterRecords
from test_store import Opener, opener  # noqa: F401 (the fixture)

GRANTED = VoterRecord(7, "router-b/backup", LogPosition(6, 120), LogPosition(7, 0))


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
    store = await opener.reopen(store)
    assert await store.voter_records() == {
        "router-b": (GRANTED, 4000),
        "router-c": (VoterRecord(1, "router-c/primary"), 3000),
    }


@pytest_twisted.ensureDeferred
async def test_the_upgrade_from_version_3_adds_the_table_and_keeps_the_data(opener):  # noqa: F811
    store = await opener.open()
    await store.close()
    with sqlite3.connect(store.path) as connection:
        connection.execute("DROP TABLE ha_voter_records")
        connection.execute("DROP TABLE replication_state")  # version 5
        connection.execute("DROP TABLE peer_epochs")  # version 6
        connection.execute("DROP TABLE known_routers")  # version 7
        connection.execute("DROP INDEX messages_expiring")  # version 9
        connection.execute("ALTER TABLE messages DROP COLUMN expires_ms")
        connection.execute("UPDATE meta SET value = 3 WHERE key = 'schema_version'")
    store = await opener.open()
    assert store.applied_versions[:2] == [4, 5]
    await store.save_voter_record("router-b", GRANTED, 3000)
    assert await store.voter_records() == {"router-b": (GRANTED, 3000)}
