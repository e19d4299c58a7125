"""
The routers a router has heard of, durably (L{IKnownRouters}, schema
version 7): saved once per name, still there after the store is closed
and opened again, read back at start into the route table by
L{KnownRouters}, which saves the names the table heard first in batches,
one save at a time.
"""

import sqlite3

import pytest_twisted
from twisted.internet import defer
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from meshroute.interfaces import IKnownRouters
from meshroute.routing.known import KnownRouters
from meshroute.routing.table import Advertisement, RouteTable
from support.store_testing import LATEST_SCHEMA, rewind_schema
from support.store_testing import opener  # noqa: F401 (the fixture)


@pytest_twisted.ensureDeferred
async def test_known_routers_survive_reopening(opener):  # noqa: F811
    store = await opener.open()
    assert verifyObject(IKnownRouters, store)
    assert await store.known_routers() == set()
    await store.save_known_routers(["router-b", "router-c"])
    await store.save_known_routers(["router-c", "router-d"])  # c once only
    store = await opener.reopen(store)
    assert await store.known_routers() == {"router-b", "router-c", "router-d"}


@pytest_twisted.ensureDeferred
async def test_the_upgrade_from_version_6_adds_the_table(opener):  # noqa: F811
    store = await opener.open()
    await store.close()
    with sqlite3.connect(store.path) as connection:
        rewind_schema(connection, 6)
    store = await opener.open()
    assert store.applied_versions == list(range(7, LATEST_SCHEMA + 1))
    await store.save_known_routers(["router-b"])
    assert await store.known_routers() == {"router-b"}


class HeldStore:
    """
    An L{IKnownRouters} whose saves wait until the test fires them.
    """

    def __init__(self, saved=()) -> None:
        self.saved = set(saved)
        self.saves: list[tuple[list[str], defer.Deferred]] = []

    def known_routers(self) -> defer.Deferred:
        return defer.succeed(set(self.saved))

    def save_known_routers(self, names) -> defer.Deferred:
        d = defer.Deferred()
        self.saves.append((list(names), d))
        return d

    def finish(self, failure: Exception | None = None) -> list[str]:
        names, d = self.saves.pop(0)
        if failure is None:
            self.saved.update(names)
            d.callback(None)
        else:
            d.errback(failure)
        return names


def test_loaded_names_are_known_and_not_saved_again():
    table = RouteTable("router-a", Clock())
    known = KnownRouters(HeldStore({"router-c"}), table)
    known.load()
    assert table.known("router-c") and not table.known("router-d")
    table.received(Advertisement("router-b", 1, ("router-a", "router-c")))
    assert table.newly_heard() == {"router-b"}
    assert table.newly_heard() == set()


def test_names_heard_during_a_save_go_in_the_next_one():
    store = HeldStore()
    table = RouteTable("router-a", Clock())
    known = KnownRouters(store, table)
    known.load()
    known.heard({"router-b"})
    known.heard({"router-c", "router-d"})  # the first save still runs
    known.heard({"router-e"})
    assert [names for names, _ in store.saves] == [["router-b"]]
    assert store.finish() == ["router-b"]
    assert store.finish() == ["router-c", "router-d", "router-e"]
    assert store.saves == []


def test_names_of_a_failed_save_are_saved_with_the_next(observe_errors):
    store = HeldStore()
    known = KnownRouters(store, RouteTable("router-a", Clock()))
    known.heard({"router-b"})
    store.finish(sqlite3.OperationalError("disk I/O error"))
    assert len(observe_errors.take(lambda e: e.get("log_failure") is not None)) == 1
    assert store.saves == []
    known.heard({"router-c"})
    assert store.finish() == ["router-b", "router-c"]
