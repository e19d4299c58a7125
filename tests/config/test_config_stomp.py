"""
Tests for C{[stomp.listener]}'s own keys in L{meshroute.config}: its
defaults, each read, refusals that name the file and the key.  The keys
it shares with C{[mqtt.listener]} are tested over both protocols in
test_config_protocol_listeners.py.
"""

import dataclasses

import pytest

from meshroute.config_writer import format_config
from meshroute.stomp.settings import StompListenerSettings

from support.config_files import (  # noqa: F401 (secret_file, write: fixtures)
    ROUTER, assert_refused, load, secret_file, write)

STOMP = """
[stomp.listener]
endpoint = "tcp:61613:interface=127.0.0.1"
"""


def test_the_defaults_are_the_documented_ones(write):
    settings = load(write(ROUTER + STOMP)).stomp_listener
    assert settings == StompListenerSettings(endpoint=("tcp:61613:interface=127.0.0.1",))
    assert (settings.websocket_path, settings.heartbeat_ms) == ("/stomp", (10_000, 10_000))


def test_its_own_keys_are_read(write):
    settings = load(write(ROUTER + STOMP + 'heart-beat = "0,5000"\n')).stomp_listener
    assert settings == StompListenerSettings(endpoint=("tcp:61613:interface=127.0.0.1",),
                                             heartbeat_ms=(0, 5000))


@pytest.mark.parametrize("extra, key, fragment", [
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


def test_format_config_round_trip(write):
    config = load(write(ROUTER + STOMP + 'heart-beat = "0,5000"\n'))
    text = format_config(config)
    assert "[stomp.listener]" in text and 'heart-beat = "0,5000"' in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)
