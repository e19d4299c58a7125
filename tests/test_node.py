"""
Tests for L{meshroute.node}'s endpoints on a real reactor.
"""

import os
import stat

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.protocol import Factory, Protocol

from meshroute.node import StringEndpoints


@pytest.mark.parametrize("options, mode", [("", 0o660), (":mode=600", 0o600)])
@pytest_twisted.ensureDeferred
async def test_a_unix_listener_socket_is_not_world_writable(tmp_path, options, mode):
    """
    Without C{mode=} a C{unix:} listener's socket is 0660, not Twisted's
    0666; a C{mode=} in the endpoint string is kept.
    """
    path = tmp_path / "clients.sock"
    port = await StringEndpoints(reactor).server(f"unix:{path}{options}").listen(
        Factory.forProtocol(Protocol))
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == mode
    finally:
        await port.stopListening()
