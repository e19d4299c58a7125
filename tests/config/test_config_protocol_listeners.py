"""
Tests for the keys every protocol listener shares (C{[stomp.listener]},
C{[mqtt.listener]}: L{meshroute.sessions.listener_settings}) in
L{meshroute.config}, over both protocols: defaults, every key, refusals
that name the file and the key, the round trip and the warning of an
open listener.  Each protocol's own keys are tested in its own file
(test_config_stomp.py, test_config_mqtt.py).
"""

import dataclasses
from dataclasses import dataclass

import pytest

from meshroute.config import config_warnings
from meshroute.config_writer import format_config
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.listener_settings import ProtocolListenerSettings

from support.certificates import make_ca, make_server_cert
from support.config_files import (  # noqa: F401 (secret_file, write: fixtures)
    ROUTER, assert_refused, load, secret_file, write)


@dataclass(frozen=True)
class Protocol:
    """
    A protocol listener as its section is written and read.

    @ivar name: its section is C{[NAME.listener]}.
    @ivar label: how its refusals and warnings name it.
    @ivar port: the port of its endpoint; C{port + 1} that of its WebSocket.
    @ivar field: the L{meshroute.config} attribute of its settings.
    @ivar websocket_path: its default WebSocket path.
    @ivar other: a table under C{[NAME]} that is not a listener.
    """

    name: str
    label: str
    port: int
    field: str
    websocket_path: str
    other: str

    @property
    def section(self) -> str:
        return (f"\n[{self.name}.listener]\n"
                f'endpoint = "tcp:{self.port}:interface=127.0.0.1"\n')

    def settings(self, config):
        return getattr(config, self.field)


PROTOCOLS = [
    Protocol("stomp", "STOMP", 61613, "stomp_listener", "/stomp", "stomp.other"),
    Protocol("mqtt", "MQTT", 1883, "mqtt_listener", "/mqtt", "mqtt.bridge"),
]


@pytest.fixture(params=PROTOCOLS, ids=lambda protocol: protocol.name)
def protocol(request) -> Protocol:
    return request.param


def shared(settings) -> dict:
    "The settings of the keys every protocol listener has."
    return {field.name: getattr(settings, field.name)
            for field in dataclasses.fields(ProtocolListenerSettings)}


def test_no_section_no_listener(write, protocol):
    assert protocol.settings(load(write(ROUTER))) is None
    assert protocol.settings(load(write(ROUTER + f"[{protocol.name}]\n"))) is None


def test_the_defaults_are_the_documented_ones(write, protocol):
    settings = protocol.settings(load(write(ROUTER + protocol.section)))
    assert shared(settings) == dict(
        endpoint=(f"tcp:{protocol.port}:interface=127.0.0.1",), websocket=(),
        websocket_path=protocol.websocket_path, ttl_override_ms=-1, client_ca=None,
        limits=ClientLimits(), prefetch_count=100)


def test_every_key_is_read(write, protocol):
    ws = protocol.port + 1
    settings = protocol.settings(load(write(ROUTER + protocol.section + f"""
websocket = ["tcp:{ws}:interface=127.0.0.1", "tcp6:{ws}:interface=\\\\:\\\\:1"]
websocket-path = "/ws/{protocol.name}"
connection-ttl-override = 30000
max-frame-size = 65536
max-connections = 3
max-sessions = 4
max-subscriptions = 5
max-unacknowledged = 600
max-headers = 7
max-header-size = 8
stage-valid-timeout = "2s"
prefetch-count = 50
""")))
    assert shared(settings) == dict(
        endpoint=(f"tcp:{protocol.port}:interface=127.0.0.1",),
        websocket=(f"tcp:{ws}:interface=127.0.0.1", f"tcp6:{ws}:interface=\\:\\:1"),
        websocket_path=f"/ws/{protocol.name}", ttl_override_ms=30000, client_ca=None,
        limits=ClientLimits(max_connections=3, max_sessions=4, max_subscriptions=5,
                            max_unacknowledged=600, max_headers=7, max_header_size=8,
                            stage_valid_timeout_ms=2000, max_frame_size=65536),
        prefetch_count=50)


#: C{(extra, key, fragment)}: C{extra} under C{[NAME.listener]} is
#: refused naming C{NAME.listener.KEY}, with C{fragment} in the message;
#: C{{name}}, C{{port}}, C{{ws}} (the port after it) and C{{label}} are
#: the protocol's.
BAD_VALUES = [
    ("", "endpoint", "required"),
    ('endpoint = "tcp:{port}"\nendpoint-typo = 1\n', "endpoint-typo", "unknown key"),
    ('endpoint = "nonsense:1"\n', "endpoint", "invalid server endpoint"),
    ('endpoint = "tcp:{port}"\nwebsocket = "tcp:99999"\n', "websocket", "port"),
    ('endpoint = "tcp:{port}"\nwebsocket = "tcp:{port}"\n', "websocket",
     "already a {label} endpoint"),
    ('endpoint = ["tcp:{port}", "tcp6:{port}"]\nwebsocket = ["tcp:{ws}", "tcp6:{port}"]\n',
     "websocket", "'tcp6:{port}' is already a {label} endpoint"),
    ('endpoint = ["tcp:{port}", "nonsense:1"]\n', "endpoint[1]", "invalid server endpoint"),
    ('endpoint = ["tcp:{port}", "tcp:{port}"]\n', "endpoint", "repeated"),
    ('endpoint = "tcp:{port}"\nwebsocket = []\n', "websocket",
     "a server endpoint string or a non-empty list"),
    ('endpoint = "tcp:{port}"\nwebsocket-path = "{name}"\n', "websocket-path",
     "absolute URL path"),
    ('endpoint = "tcp:{port}"\nwebsocket-path = "/{name}?x=1"\n', "websocket-path",
     "without query"),
    ('endpoint = "tcp:{port}"\nwebsocket-path = "/a b"\n', "websocket-path",
     "absolute URL path"),
    ('endpoint = "tcp:{port}"\nconnection-ttl-override = -2\n', "connection-ttl-override",
     "at least -1"),
    ('endpoint = "tcp:{port}"\nmax-frame-size = 100\n', "max-frame-size", "at least 65536"),
    ('endpoint = "tcp:{port}"\nmax-headers = "many"\n', "max-headers", "an integer"),
    ('endpoint = "tcp:{port}"\nprefetch-count = 0\n', "prefetch-count", "at least 1"),
    ('endpoint = "tcp:{port}"\nprefetch-count = 20000\n', "prefetch-count",
     "more than max-unacknowledged 10000"),
]


@pytest.mark.parametrize("extra, key, fragment", BAD_VALUES)
def test_bad_values_are_refused_naming_the_key(write, protocol, extra, key, fragment):
    fields = dict(name=protocol.name, port=protocol.port, ws=protocol.port + 1,
                  label=protocol.label)
    assert_refused(write(ROUTER + f"[{protocol.name}.listener]\n" + extra.format(**fields)),
                   f"{protocol.name}.listener.{key}", fragment.format(**fields))


def test_only_a_listener_lives_under_the_protocol(write, protocol):
    assert_refused(write(ROUTER + protocol.section + f"[{protocol.other}]\nx = 1\n"),
                   protocol.other, "unknown key")
    assert_refused(write(f"{protocol.name} = 1\n" + ROUTER), protocol.name,
                   "expected a table")


def test_client_ca_needs_an_ssl_endpoint_and_a_certificate(write, tmp_path, protocol):
    key, cert = make_server_cert(tmp_path, *make_ca(tmp_path / "server-ca", "test CA"))
    make_ca(tmp_path / "client-ca", "client CA")
    ca_cert = tmp_path / "client-ca" / "ca.pem"
    ssl = f"ssl:{protocol.port + 2}:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    assert_refused(write(ROUTER + protocol.section + f'client-ca = "{ca_cert}"\n'),
                   f"{protocol.name}.listener.client-ca", "need an ssl: endpoint")
    assert_refused(write(ROUTER + f'[{protocol.name}.listener]\nendpoint = "{ssl}"\n'
                         f'client-ca = "{tmp_path / "missing.pem"}"\n'),
                   f"{protocol.name}.listener.client-ca", "cannot read")
    over_websocket = protocol.settings(load(write(ROUTER + protocol.section
                                                  + f'websocket = "{ssl}"\n'
                                                  f'client-ca = "{ca_cert}"\n')))
    assert over_websocket.client_ca == str(ca_cert)


def test_format_config_round_trip(write, protocol):
    port = protocol.port
    config = load(write(ROUTER + protocol.section.replace(
        f'"tcp:{port}:interface=127.0.0.1"',
        f'["tcp:{port}:interface=127.0.0.1", "tcp6:{port}:interface=\\\\:\\\\:1"]') + f"""
websocket = "tcp:{port + 1}:interface=127.0.0.1"
connection-ttl-override = 30000
max-headers = 7
stage-valid-timeout = "2s"
"""))
    settings = protocol.settings(config)
    assert settings.endpoint == (f"tcp:{port}:interface=127.0.0.1",
                                 f"tcp6:{port}:interface=\\:\\:1")
    assert settings.websocket == (f"tcp:{port + 1}:interface=127.0.0.1",)
    text = format_config(config)
    assert f"[{protocol.name}.listener]" in text and "stage-valid-timeout = 2000" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


def test_an_open_listener_is_warned_about(write, protocol):
    config = load(write(ROUTER + protocol.section))
    [warning] = config_warnings(config)
    assert (f"{protocol.label} listener tcp:{protocol.port}:interface=127.0.0.1 is open to "
            "any client") in warning
    assert str(config.path) in warning
