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
