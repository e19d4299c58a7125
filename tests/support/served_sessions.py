"""
The router's side of client sessions as the session tests serve it: a
real L{ClientFactory} over the C{engine} fixture (the fake one of
conftest, or the real one of L{support.router_engine}), with settings
short enough for a C{task.Clock} (L{SETTINGS}).
"""

from dataclasses import replace

import pytest

from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import SessionSettings

SETTINGS = SessionSettings(connection_ttl_check_interval_ms=1000, keep_alive_ms=5000,
                           max_depth=1000, recovery_buffer_size=64)


def make_factory(engine, clock, **settings) -> ClientFactory:
    """
    A client factory with L{SETTINGS}, changed by C{settings}.
    """
    return ClientFactory(engine, clock, settings=replace(SETTINGS, **settings))


@pytest.fixture
def factory(engine, clock):
    return make_factory(engine, clock)
