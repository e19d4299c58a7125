"""
Tests for L{meshroute.router.service}'s endpoints on a real reactor.
"""

import os
import stat

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor, MemoryReactorClock

from meshroute.router.service import StringEndpoints


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


def _router_config(tmp_path, security: str):
    from meshroute.config import load_config

    path = tmp_path / "router.toml"
    path.write_text(f'[router]\nname = "router-a"\ndata-dir = "{tmp_path / "data"}"\n'
                    + security)
    return load_config(str(path), reactor=MemoryReactor())


def test_the_router_holds_the_security_policy(tmp_path):
    """
    With C{[security]} the router reads the users file into the
    L{Security} its client listener consults; without, it has none.
    """
    from meshroute.router.service import RouterService
    from meshroute.security.credentials import derive
    from meshroute.security.users import write_users
    from meshroute.store import InlineExecutor

    users = str(tmp_path / "users")
    write_users(users, {"alice": derive("pw")})
    config = _router_config(tmp_path, f'[security]\nusers-file = "{users}"\n'
                            '[[security.permission]]\nusers = ["alice"]\nconsume = ["q"]\n')
    clock = MemoryReactorClock()
    router = RouterService(config, clock, StringEndpoints(clock), InlineExecutor())
    router._unlock_data_dir()
    router.events.close()
    assert list(router.security.policy.users) == ["alice"]
    assert router.security.policy.may_consume("alice", "q")
    plain = RouterService(_router_config(tmp_path, ""), clock, StringEndpoints(clock),
                          InlineExecutor())
    plain._unlock_data_dir()
    plain.events.close()
    assert plain.security is None


def test_a_bad_users_file_stops_the_router_before_the_data_dir_is_used(tmp_path):
    from meshroute.errors import ConfigError
    from meshroute.router.service import RouterService
    from meshroute.store import InlineExecutor

    users = tmp_path / "users"
    users.write_text("alice nonsense\n")
    users.chmod(0o600)
    config = _router_config(tmp_path, f'[security]\nusers-file = "{users}"\n')
    clock = MemoryReactorClock()
    with pytest.raises(ConfigError, match="line 1 \\(user alice\\)"):
        RouterService(config, clock, StringEndpoints(clock), InlineExecutor())
    assert not (tmp_path / "data").exists()


def test_only_the_admin_api_answers_until_the_store_is_open(tmp_path):
    """
    Every port is bound by C{privilegedStartService}.  The admin API
    answers from C{startService} on (saying the router does not serve
    yet); the routing, client, STOMP and WebSocket listeners accept
    nothing until the store is open, so that a connection made meanwhile
    waits in its port's backlog and is served then, never closed bare.
    """
    from twisted.internet.defer import Deferred

    from support.fakes import RecordingEndpoints
    from meshroute.admin.api import admin_site
    from meshroute.router.service import RouterService
    from meshroute.store import InlineExecutor

    class HeldOpen(InlineExecutor):
        """
        Opens the store once C{opening} fires.
        """

        def __init__(self) -> None:
            super().__init__()
            self.opening = Deferred()

        def start(self, connect):
            return self.opening.addCallback(lambda _: InlineExecutor.start(self, connect))

    secret = tmp_path / "mesh.secret"
    secret.write_text("a mesh secret\n")
    secret.chmod(0o600)
    config = _router_config(tmp_path, f"""
[routing.listener]
endpoint = "tcp:7001"
password-file = "{secret}"
[clients.listener]
endpoint = "tcp:7002"
[stomp.listener]
endpoint = "tcp:7003"
websocket = "tcp:7004"
[admin]
endpoint = "tcp:7005:interface=127.0.0.1"
""")
    clock = MemoryReactorClock()
    endpoints = RecordingEndpoints()
    executor = HeldOpen()
    router = RouterService(config, clock, endpoints, executor, admin_site=admin_site)
    router.privilegedStartService()
    router.startService()
    calls = {description: endpoint.port.calls
             for description, endpoint in endpoints.servers.items()}
    assert calls == {"tcp:7001": ["pause"], "tcp:7002": ["pause"], "tcp:7003": ["pause"],
                     "tcp:7004": ["pause"], "tcp:7005:interface=127.0.0.1": ["pause", "resume"]}
    assert router.describe()["serving"] is False
    executor.opening.callback(None)
    assert all(port_calls == ["pause", "resume"] for port_calls in calls.values())
    assert router.describe()["serving"] is True
    assert router.stopService().called
