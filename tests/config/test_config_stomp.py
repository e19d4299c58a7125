"""
Tests for C{[stomp.listener]} in L{meshroute.config}: defaults, every key,
and refusals that name the file and the key.
"""

import dataclasses

import pytest

from meshroute.config import config_warnings
from meshroute.config_writer import format_config
from meshroute.sessions.limits import ClientLimits
from meshroute.stomp.settings import StompListenerSettings

from support.certificates import make_ca, make_server_cert
from support.config_files import (  # noqa: F401 (secret_file, write: fixtures)
    ROUTER, assert_refused, load, secret_file, write)

STOMP = """
[stomp.listener]
endpoint = "tcp:61613:interface=127.0.0.1"
"""


def test_no_section_no_listener(write):
    assert load(write(ROUTER)).stomp_listener is None
    assert load(write(ROUTER + "[stomp]\n")).stomp_listener is None


def test_the_defaults_are_the_documented_ones(write):
    assert load(write(ROUTER + STOMP)).stomp_listener == StompListenerSettings(
        endpoint=("tcp:61613:interface=127.0.0.1",), websocket=(), websocket_path="/stomp",
        ttl_override_ms=-1, client_ca=None, limits=ClientLimits(), prefetch_count=100,
        heartbeat_ms=(10_000, 10_000))


def test_every_key_is_read(write):
    settings = load(write(ROUTER + STOMP + """
websocket = "tcp:61614:interface=127.0.0.1"
websocket-path = "/ws/stomp"
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
heart-beat = "0,5000"
""")).stomp_listener
    assert settings == StompListenerSettings(
        endpoint=("tcp:61613:interface=127.0.0.1",),
        websocket=("tcp:61614:interface=127.0.0.1",),
        websocket_path="/ws/stomp", ttl_override_ms=30000, client_ca=None,
        limits=ClientLimits(max_connections=3, max_sessions=4, max_subscriptions=5,
                            max_unacknowledged=600, max_headers=7, max_header_size=8,
                            stage_valid_timeout_ms=2000, max_frame_size=65536),
        prefetch_count=50, heartbeat_ms=(0, 5000))


@pytest.mark.parametrize("extra, key, fragment", [
    ("", "stomp.listener.endpoint", "required"),
    ('endpoint = "tcp:61613"\nendpoint-typo = 1\n', "stomp.listener.endpoint-typo",
     "unknown key"),
    ('endpoint = "nonsense:1"\n', "stomp.listener.endpoint", "invalid server endpoint"),
    ('endpoint = "tcp:61613"\nwebsocket = "tcp:99999"\n', "stomp.listener.websocket", "port"),
    ('endpoint = "tcp:61613"\nwebsocket = "tcp:61613"\n', "stomp.listener.websocket",
     "already a STOMP endpoint"),
    ('endpoint = ["tcp:61613", "tcp6:61613"]\nwebsocket = ["tcp:61614", "tcp6:61613"]\n',
     "stomp.listener.websocket", "'tcp6:61613' is already a STOMP endpoint"),
    ('endpoint = ["tcp:61613", "nonsense:1"]\n', "stomp.listener.endpoint[1]",
     "invalid server endpoint"),
    ('endpoint = ["tcp:61613", "tcp:61613"]\n', "stomp.listener.endpoint", "repeated"),
    ('endpoint = "tcp:61613"\nwebsocket = []\n', "stomp.listener.websocket",
     "a server endpoint string or a non-empty list"),
    ('endpoint = "tcp:61613"\nwebsocket-path = "stomp"\n', "stomp.listener.websocket-path",
     "absolute URL path"),
    ('endpoint = "tcp:61613"\nwebsocket-path = "/stomp?x=1"\n',
     "stomp.listener.websocket-path", "without query"),
    ('endpoint = "tcp:61613"\nwebsocket-path = "/a b"\n', "stomp.listener.websocket-path",
     "absolute URL path"),
    ('endpoint = "tcp:61613"\nconnection-ttl-override = -2\n',
     "stomp.listener.connection-ttl-override", "at least -1"),
    ('endpoint = "tcp:61613"\nmax-frame-size = 100\n', "stomp.listener.max-frame-size",
     "at least 65536"),
    ('endpoint = "tcp:61613"\nmax-headers = "many"\n', "stomp.listener.max-headers",
     "an integer"),
    ('endpoint = "tcp:61613"\nprefetch-count = 0\n', "stomp.listener.prefetch-count",
     "at least 1"),
    ('endpoint = "tcp:61613"\nprefetch-count = 20000\n', "stomp.listener.prefetch-count",
     "more than max-unacknowledged 10000"),
    ('endpoint = "tcp:61613"\nheart-beat = "10000"\n', "stomp.listener.heart-beat",
     "not two numbers"),
    ('endpoint = "tcp:61613"\nheart-beat = "-1,0"\n', "stomp.listener.heart-beat",
     "not two numbers"),
    ('endpoint = "tcp:61613"\nheart-beat = 5000\n', "stomp.listener.heart-beat",
     "a non-empty string"),
    ('endpoint = "tcp:61613"\nheart-beat = "0,86400000"\n', "stomp.listener.heart-beat",
     "at most 3600000"),
])
def test_bad_values_are_refused_naming_the_key(write, extra, key, fragment):
    assert_refused(write(ROUTER + "[stomp.listener]\n" + extra), key, fragment)


def test_only_a_listener_lives_under_stomp(write):
    assert_refused(write(ROUTER + STOMP + "[stomp.other]\nx = 1\n"), "stomp.other",
                   "unknown key")
    assert_refused(write("stomp = 1\n" + ROUTER), "stomp", "expected a table")


def test_client_ca_needs_an_ssl_endpoint_and_a_certificate(write, tmp_path):
    key, cert = make_server_cert(tmp_path, *make_ca(tmp_path / "server-ca", "test CA"))
    make_ca(tmp_path / "client-ca", "client CA")
    ca_cert = tmp_path / "client-ca" / "ca.pem"
    ssl = f"ssl:61615:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    assert_refused(write(ROUTER + STOMP + f'client-ca = "{ca_cert}"\n'),
                   "stomp.listener.client-ca", "need an ssl: endpoint")
    assert_refused(write(ROUTER + f'[stomp.listener]\nendpoint = "{ssl}"\n'
                         f'client-ca = "{tmp_path / "missing.pem"}"\n'),
                   "stomp.listener.client-ca", "cannot read")
    over_websocket = load(write(ROUTER + STOMP + f'websocket = "{ssl}"\n'
                                f'client-ca = "{ca_cert}"\n')).stomp_listener
    assert over_websocket.client_ca == str(ca_cert)


def test_format_config_round_trip(write):
    config = load(write(ROUTER + STOMP.replace(
        '"tcp:61613:interface=127.0.0.1"',
        '["tcp:61613:interface=127.0.0.1", "tcp6:61613:interface=\\\\:\\\\:1"]') + """
websocket = "tcp:61614:interface=127.0.0.1"
connection-ttl-override = 30000
max-headers = 7
stage-valid-timeout = "2s"
heart-beat = "0,5000"
"""))
    assert config.stomp_listener.endpoint == ("tcp:61613:interface=127.0.0.1",
                                              "tcp6:61613:interface=\\:\\:1")
    text = format_config(config)
    assert "[stomp.listener]" in text and 'heart-beat = "0,5000"' in text
    assert "stage-valid-timeout = 2000" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


def test_an_open_stomp_listener_is_warned_about(write):
    config = load(write(ROUTER + STOMP))
    [warning] = config_warnings(config)
    assert "STOMP listener tcp:61613:interface=127.0.0.1 is open to any client" in warning
    assert str(config.path) in warning
