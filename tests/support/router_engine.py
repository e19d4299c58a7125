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


@pytest.fixture
def store(tmp_path, clock):
    store = SQLiteStore(str(tmp_path / "engine.sqlite"), "normal", InlineExecutor(),
                        router=ROUTER, clock=clock, duplicate_id_window_s=60)
    store.open()
    yield store
    store.close()


@pytest.fixture
def engine(store, clock):
    events = RecordingEvents()
    engine = MessageEngine(ROUTER, store, RouteTable(ROUTER, clock), events, clock)
    engine.events = events
    return engine
