"""
Tests for L{meshroute.tap}: the twistd plugin's options.
"""

import pytest
from twisted.logger import globalLogPublisher
from twisted.python import usage

from meshroute import tap
from meshroute.harules import settings as ha_settings

from support.config_files import secret_file, write  # noqa: F401 (fixtures)
from support.ha_config_sections import HA, REPLICATION, ROUTER


@pytest.fixture
def logged():
    events = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def test_the_configuration_s_warnings_are_logged_at_start(write, logged):
    path = write(ROUTER + HA + REPLICATION)
    options = tap.Options()
    options.parseOptions(["--config", str(path)])
    warnings = [e for e in logged if e.get("log_namespace") == "meshroute.tap"]
    assert [e["warning"] for e in warnings] == [
        f"{path}: ha.witness: " + ha_settings.warnings(options["router-config"].ha)[0]
        .message]
    assert all(e["log_level"].name == "warn" for e in warnings)


def test_a_bad_configuration_is_a_usage_error(write):
    path = write(ROUTER + "[routing]\nmax-hops = 0\n")
    with pytest.raises(usage.UsageError, match="routing.max-hops"):
        tap.Options().parseOptions(["--config", str(path)])


def test_the_hosted_files_are_checked_and_their_warnings_logged_at_start(write, logged,
                                                                         tmp_path):
    hosted = write(ROUTER + HA.replace("primary", "backup") + REPLICATION, name="hosted.toml")
    path = write('[router]\nname = "router-a"\ndata-dir = "var/a"\n'
                 '[[ha.colocated]]\nconfig = "hosted.toml"\n')
    tap.Options().parseOptions(["--config", str(path)])
    warnings = [e["warning"] for e in logged if e.get("log_namespace") == "meshroute.tap"]
    assert [w.split(": ")[:2] for w in warnings] == [[str(hosted), "ha.witness"]]
    # Its users file too, which its router reads only once active.
    hosted.write_text(hosted.read_text() + f'[security]\nusers-file = "{tmp_path / "none"}"\n')
    with pytest.raises(usage.UsageError, match=f"{tmp_path / 'none'}: cannot read"):
        tap.Options().parseOptions(["--config", str(path)])
