"""
Tests for L{meshroute.node}'s endpoints on a real reactor.
"""

import os
import stat

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.protocol import Factory, Protocol

from meshroute.node import StringEndpoints


@pytest_twisted.ensureDeferred
async def test_a_unix_listener_socket_is_not_world_writable(tmp_path):
    path = tmp_path / "clients.sock"
    port = await StringEndpoints(reactor).server(f"unix:{path}").listen(
        Factory.forProtocol(Protocol))
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_unix_listener_socket_keeps_the_mode_it_was_given(tmp_path):
    path = tmp_path / "admin.sock"
    port = await StringEndpoints(reactor).server(f"unix:{path}:mode=600").listen(
        Factory.forProtocol(Protocol))
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        await port.stopListening()
