"""
The highest epoch seen per peer router name (L{IPeerEpochs}, schema
version 6), through both executors: saved, never lowered, still there
after the store is closed and opened again, and read back by
L{PeerEpochs}, which a router loads at start.
"""

import sqlite3

import pytest_twisted
from zope.interface.verify import verifyObject

from meshroute.interfaces import IPeerEpochs
from meshroute.link.epochs import PeerEpochs
from meshroute.link.registry import LinkRegistry
from support.store_testing import LATEST_SCHEMA, rewind_schema
from support.store_testing import opener  # noqa: F401 (the fixture)


@pytest_twisted.ensureDeferred
async def test_epochs_survive_reopening_and_are_never_lowered(opener):  # noqa: F811
    store = await opener.open()
    assert verifyObject(IPeerEpochs, store)
    assert await store.peer_epochs() == {}
    await store.save_peer_epoch("router-b", 3)
    await store.save_peer_epoch("router-b", 2)  # a save that lost a race lowers nothing
    await store.save_peer_epoch("router-c", 1)
    store = await opener.reopen(store)
    assert await store.peer_epochs() == {"router-b": 3, "router-c": 1}


@pytest_twisted.ensureDeferred
async def test_a_restarted_router_knows_the_epochs_it_saw(opener):  # noqa: F811
    store = await opener.open()
    epochs = PeerEpochs(store, LinkRegistry())
    await epochs.load()
    assert epochs.raise_to("router-b", 0) is None  # a router without HA: nothing to save
    await epochs.raise_to("router-b", 4)
    assert epochs.highest("router-b") == 4
    assert epochs.raise_to("router-b", 4) is None
    store = await opener.reopen(store)
    restarted = PeerEpochs(store, LinkRegistry())
    await restarted.load()
    assert restarted.highest("router-b") == 4
    assert restarted.highest("router-c") == 0


@pytest_twisted.ensureDeferred
async def test_the_upgrade_from_version_5_adds_the_table(opener):  # noqa: F811
    store = await opener.open()
    await store.close()
    with sqlite3.connect(store.path) as connection:
        rewind_schema(connection, 5)
    store = await opener.open()
    assert store.applied_versions == list(range(6, LATEST_SCHEMA + 1))
    await store.save_peer_epoch("router-b", 2)
    assert await store.peer_epochs() == {"router-b": 2}
