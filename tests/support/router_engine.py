"""
A real message engine (L{MessageEngine}) on an inline SQLite store, on the
test's virtual clock, with recorded events: the C{store} and C{engine}
fixtures of the router-side session tests and of the client tests that
talk to a real engine.
"""

import pytest

from meshroute.router.engine import MessageEngine
from meshroute.routing.table import RouteTable
from meshroute.store import InlineExecutor, SQLiteStore
from support.fake_router import ROUTER, RecordingEvents


def engine_store(directory, clock) -> SQLiteStore:
    """
    An inline SQLite store in C{directory}, open (the caller closes it).
    """
    store = SQLiteStore(str(directory / "engine.sqlite"), "normal", InlineExecutor(),
                        router=ROUTER, clock=clock, duplicate_id_window_s=60)
    store.open()
    return store


def engine_on(store, clock) -> MessageEngine:
    """
    The real engine over C{store}, its events recorded in C{.events}.
    """
    events = RecordingEvents()
    engine = MessageEngine(ROUTER, store, RouteTable(ROUTER, clock), events, clock)
    engine.events = events
    return engine


@pytest.fixture
def store(tmp_path, clock):
    store = engine_store(tmp_path, clock)
    yield store
    store.close()


@pytest.fixture
def engine(store, clock):
    return engine_on(store, clock)
