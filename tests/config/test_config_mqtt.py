"""
Tests for C{[mqtt.listener]} in L{meshroute.config}: defaults, every key,
and refusals that name the file and the key (the keys it shares with
C{[stomp.listener]} are judged by the same rules: test_config_stomp.py).
"""

import dataclasses

import pytest

from meshroute.config import config_warnings
from meshroute.config_writer import format_config
from meshroute.mqtt.settings import MqttListenerSettings
from meshroute.sessions.limits import ClientLimits

from support.config_files import (  # noqa: F401 (secret_file, write: fixtures)
    ROUTER, assert_refused, load, secret_file, write)

MQTT = """
[mqtt.listener]
endpoint = "tcp:1883:interface=127.0.0.1"
"""


def test_no_section_no_listener(write):
    assert load(write(ROUTER)).mqtt_listener is None
    assert load(write(ROUTER + "[mqtt]\n")).mqtt_listener is None


def test_the_defaults_are_the_documented_ones(write):
    assert load(write(ROUTER + MQTT)).mqtt_listener == MqttListenerSettings(
        endpoint=("tcp:1883:interface=127.0.0.1",), websocket=(), websocket_path="/mqtt",
        ttl_override_ms=-1, client_ca=None, limits=ClientLimits(), prefetch_count=100,
        topic_alias_maximum=16, mesh_wide=True)


def test_every_key_is_read(write):
    settings = load(write(ROUTER + MQTT + """
websocket = ["tcp:8083:interface=127.0.0.1", "tcp6:8083:interface=\\\\:\\\\:1"]
websocket-path = "/ws/mqtt"
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
topic-alias-maximum = 0
mesh-wide = false
""")).mqtt_listener
    assert settings == MqttListenerSettings(
        endpoint=("tcp:1883:interface=127.0.0.1",),
        websocket=("tcp:8083:interface=127.0.0.1", "tcp6:8083:interface=\\:\\:1"),
        websocket_path="/ws/mqtt", ttl_override_ms=30000, client_ca=None,
        limits=ClientLimits(max_connections=3, max_sessions=4, max_subscriptions=5,
                            max_unacknowledged=600, max_headers=7, max_header_size=8,
                            stage_valid_timeout_ms=2000, max_frame_size=65536),
        prefetch_count=50, topic_alias_maximum=0, mesh_wide=False)


@pytest.mark.parametrize("extra, key, fragment", [
    ("", "mqtt.listener.endpoint", "required"),
    ('endpoint = "tcp:1883"\nretain = true\n', "mqtt.listener.retain", "unknown key"),
    ('endpoint = "nonsense:1"\n', "mqtt.listener.endpoint", "invalid server endpoint"),
    ('endpoint = "tcp:1883"\nwebsocket = "tcp:1883"\n', "mqtt.listener.websocket",
     "already a MQTT endpoint"),
    ('endpoint = "tcp:1883"\nwebsocket-path = "mqtt"\n', "mqtt.listener.websocket-path",
     "absolute URL path"),
    ('endpoint = "tcp:1883"\nconnection-ttl-override = -2\n',
     "mqtt.listener.connection-ttl-override", "at least -1"),
    ('endpoint = "tcp:1883"\nprefetch-count = 20000\n', "mqtt.listener.prefetch-count",
     "more than max-unacknowledged 10000"),
    ('endpoint = "tcp:1883"\ntopic-alias-maximum = 65536\n',
     "mqtt.listener.topic-alias-maximum", "at most 65535"),
    ('endpoint = "tcp:1883"\nmesh-wide = "yes"\n', "mqtt.listener.mesh-wide", "true or false"),
])
def test_bad_values_are_refused_naming_the_key(write, extra, key, fragment):
    assert_refused(write(ROUTER + "[mqtt.listener]\n" + extra), key, fragment)


def test_only_a_listener_lives_under_mqtt(write):
    assert_refused(write(ROUTER + MQTT + "[mqtt.bridge]\nx = 1\n"), "mqtt.bridge",
                   "unknown key")
    assert_refused(write("mqtt = 1\n" + ROUTER), "mqtt", "expected a table")


def test_format_config_round_trip(write):
    config = load(write(ROUTER + MQTT + """
websocket = "tcp:8083:interface=127.0.0.1"
connection-ttl-override = 30000
stage-valid-timeout = "2s"
topic-alias-maximum = 100
mesh-wide = false
"""))
    text = format_config(config)
    assert "[mqtt.listener]" in text and "topic-alias-maximum = 100" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


def test_an_open_mqtt_listener_is_warned_about(write):
    config = load(write(ROUTER + MQTT))
    [warning] = config_warnings(config)
    assert "MQTT listener tcp:1883:interface=127.0.0.1 is open to any client" in warning
