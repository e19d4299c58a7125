"""
Tests for C{[mqtt.listener]}'s own keys in L{meshroute.config}: its
defaults, each read, refusals that name the file and the key.  The keys
it shares with C{[stomp.listener]} are tested over both protocols in
test_config_protocol_listeners.py.
"""

import dataclasses

import pytest

from meshroute.config_writer import format_config
from meshroute.mqtt.settings import MqttListenerSettings

from support.config_files import (  # noqa: F401 (secret_file, write: fixtures)
    ROUTER, assert_refused, load, secret_file, write)

MQTT = """
[mqtt.listener]
endpoint = "tcp:1883:interface=127.0.0.1"
"""


def test_the_defaults_are_the_documented_ones(write):
    settings = load(write(ROUTER + MQTT)).mqtt_listener
    assert settings == MqttListenerSettings(endpoint=("tcp:1883:interface=127.0.0.1",))
    assert (settings.websocket_path, settings.topic_alias_maximum, settings.mesh_wide) == (
        "/mqtt", 16, True)


def test_its_own_keys_are_read(write):
    settings = load(write(ROUTER + MQTT + """
topic-alias-maximum = 0
mesh-wide = false
""")).mqtt_listener
    assert settings == MqttListenerSettings(endpoint=("tcp:1883:interface=127.0.0.1",),
                                            topic_alias_maximum=0, mesh_wide=False)


@pytest.mark.parametrize("extra, key, fragment", [
    # Retained messages are the mesh's ([routing]), not a listener's.
    ('endpoint = "tcp:1883"\nretain = true\n', "mqtt.listener.retain", "unknown key"),
    ('endpoint = "tcp:1883"\ntopic-alias-maximum = 65536\n',
     "mqtt.listener.topic-alias-maximum", "at most 65535"),
    ('endpoint = "tcp:1883"\nmesh-wide = "yes"\n', "mqtt.listener.mesh-wide", "true or false"),
])
def test_bad_values_are_refused_naming_the_key(write, extra, key, fragment):
    assert_refused(write(ROUTER + "[mqtt.listener]\n" + extra), key, fragment)


def test_format_config_round_trip(write):
    config = load(write(ROUTER + MQTT + """
topic-alias-maximum = 100
mesh-wide = false
"""))
    text = format_config(config)
    assert "[mqtt.listener]" in text and "topic-alias-maximum = 100" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)
