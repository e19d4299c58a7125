"""
Tests for L{meshroute.config}: every refusal names the file and the key.
"""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactor

from support.certificates import make_ca, make_server_cert
from support.config_files import (  # noqa: F401 (fixtures)
    ROUTER,
    SECRET,
    assert_refused,
    load,
    secret_file,
    write,
)

from meshroute.router.admin_settings import AdminConfig
from meshroute.config import load_config
from meshroute.config_keys import parse_duration_ms
from meshroute.config_writer import format_config
from meshroute.errors import ConfigError
from meshroute.events import RetainBytes, RotationSettings
from meshroute.link.settings import ConnectorConfig, ListenerConfig
from meshroute.router.settings import RouterConfig

LISTENER = """
[routing.listener]
endpoint = "tcp:7001:interface=127.0.0.1"
password-file = "{secret}"
"""

CONNECTOR = """
[[routing.connector]]
router = "router-b"
endpoint = "tcp:127.0.0.1:7002"
password-file = "{secret}"
"""

ADMIN = """
[admin]
endpoint = "tcp:8001:interface=127.0.0.1"
"""


def test_full_config_with_defaults(write, secret_file):
    path = write(ROUTER + LISTENER + CONNECTOR + ADMIN)
    assert load(path) == RouterConfig(
        path=str(path),
        name="router-a",
        data_dir="var/router-a",
        listener=ListenerConfig(
            endpoint="tcp:7001:interface=127.0.0.1",
            password_file=str(secret_file),
            secret=SECRET.encode(),
            keepalive_interval_ms=60000,
            stage_valid_timeout_ms=15000,
            reject_disconnect_delay_ms=5000,
            allowed_routers=None,
        ),
        connectors=(
            ConnectorConfig(
                router="router-b",
                endpoint=("tcp:127.0.0.1:7002",),
                password_file=str(secret_file),
                secret=SECRET.encode(),
                retry_interval_ms=2000,
                retry_interval_multiplier=1.0,
                max_retry_interval_ms=2000,
                reconnect_attempts=-1,
                stage_valid_timeout_ms=15000,
            ),
        ),
        admin=AdminConfig(endpoint="tcp:8001:interface=127.0.0.1"),
    )


def test_minimal_config(write):
    config = load(write(ROUTER))
    assert (config.listener, config.connectors, config.admin) == (None, (), None)


def test_explicit_values(write):
    path = write(
        ROUTER
        + LISTENER
        + """keepalive-interval = "500ms"
stage-valid-timeout = "15s"
reject-disconnect-delay = "2m"
allowed-routers = ["router-b", "router.c"]
"""
        + CONNECTOR
        + """retry-interval = 1000
retry-interval-multiplier = 2
max-retry-interval = "1h"
reconnect-attempts = 0
stage-valid-timeout = "1.5s"
"""
    )
    config = load(path)
    assert config.listener.keepalive_interval_ms == 500
    assert config.listener.stage_valid_timeout_ms == 15000
    assert config.listener.reject_disconnect_delay_ms == 120000
    assert config.listener.allowed_routers == ("router-b", "router.c")
    [connector] = config.connectors
    assert connector.retry_interval_ms == 1000
    assert connector.retry_interval_multiplier == 2.0
    assert isinstance(connector.retry_interval_multiplier, float)
    assert connector.max_retry_interval_ms == 3_600_000
    assert connector.reconnect_attempts == 0
    assert connector.stage_valid_timeout_ms == 1500


@pytest.mark.parametrize(
    "value, expected",
    [
        (250, 250),
        ('"500ms"', 500),
        ('"15s"', 15000),
        ('"2m"', 120000),
        ('"1h"', 3_600_000),
        ('"1.5s"', 1500),
    ],
)
def test_duration_forms(write, value, expected):
    path = write(ROUTER + LISTENER + f"keepalive-interval = {value}\n")
    assert load(path).listener.keepalive_interval_ms == expected


@pytest.mark.parametrize(
    "value", ['"15"', '"15 s"', '"1.5ms"', '"-1s"', "1.5", "-1", "true", '"2d"', "[1]"]
)
def test_bad_durations(write, value):
    path = write(ROUTER + LISTENER + f"stage-valid-timeout = {value}\n")
    assert_refused(path, "routing.listener.stage-valid-timeout")


@pytest.mark.parametrize(
    "section, key, value",
    [
        (LISTENER, "keepalive-interval", 9),
        (LISTENER, "stage-valid-timeout", 999),
        (LISTENER, "reject-disconnect-delay", '"0.999s"'),
        (CONNECTOR, "retry-interval", 0),
        (CONNECTOR, "retry-interval-multiplier", 0.5),
        (CONNECTOR, "stage-valid-timeout", 999),
    ],
)
def test_minimums(write, section, key, value):
    path = write(ROUTER + section + f"{key} = {value}\n")
    prefix = "routing.listener" if section is LISTENER else "routing.connector[0]"
    assert_refused(path, f"{prefix}.{key}", "at least")


def test_bool_is_not_an_integer(write):
    path = write(ROUTER + CONNECTOR + "reconnect-attempts = true\n")
    assert_refused(path, "routing.connector[0].reconnect-attempts", "integer")
    path = write(ROUTER + LISTENER + "keepalive-interval = true\n")
    assert_refused(path, "routing.listener.keepalive-interval", "True")


@pytest.mark.parametrize("value", ['"1.0"', "true", "nan", "inf"])
def test_bad_multiplier(write, value):
    path = write(ROUTER + CONNECTOR + f"retry-interval-multiplier = {value}\n")
    assert_refused(path, "routing.connector[0].retry-interval-multiplier")


def test_wrong_type_string(write):
    path = write('[router]\nname = "router-a"\ndata-dir = 7\n')
    assert_refused(path, "router.data-dir", "string")


def test_unknown_section(write):
    path = write(ROUTER + "[storage]\nsync = 'full'\n")
    assert_refused(path, "storage", "unknown key",
                   "admin, clients, events, ha, mqtt, router, routing, security, stomp, store")


def test_unknown_routing_key(write):
    path = write(ROUTER + "[routing]\nmax-hop = 16\n")
    assert_refused(path, "routing.max-hop", "unknown key",
                   "connector, early-accept-hold, hold-publishers-at, listener, max-backlog, "
                   "max-hops, max-retained, max-retained-bytes, max-transient-backlog, "
                   "reroute-delay")


def test_the_early_accept_hold_is_read_from_routing(write):
    path = write(ROUTER + "[routing]\nearly-accept-hold = 0\n")
    assert load(path).routing.early_accept_hold_ms == 0
    assert load(write(ROUTER)).routing.early_accept_hold_ms == 10
    assert_refused(write(ROUTER + "[routing]\nearly-accept-hold = 1001\n"),
                   "routing.early-accept-hold")


def test_the_retained_limits_are_read_from_routing(write):
    path = write(ROUTER + "[routing]\nmax-retained = 5\nmax-retained-bytes = \"1 MiB\"\n")
    config = load_config(path, reactor=MemoryReactor())
    assert (config.routing.max_retained, config.routing.max_retained_bytes) == (5, 1024 * 1024)
    assert load_config(write(ROUTER), reactor=MemoryReactor()).routing.max_retained == 10_000


def test_hold_publishers_at_is_read_from_routing(write):
    path = write(ROUTER + "[routing]\nhold-publishers-at = 100\n")
    assert load_config(path, reactor=MemoryReactor()).routing.hold_publishers_at == 100
    assert load_config(write(ROUTER), reactor=MemoryReactor()).routing.hold_publishers_at == 4096
    assert_refused(write(ROUTER + "[routing]\nhold-publishers-at = 1\n"),
                   "routing.hold-publishers-at")


def test_routing_store_and_clients_sections(write):
    path = write(ROUTER + "[routing]\nmax-hops = 4\nmax-backlog = 10\nreroute-delay = \"2s\"\n"
                 "[store]\nsync = \"normal\"\n"
                 "[clients.listener]\nendpoint = \"tcp:6001:interface=127.0.0.1\"\n")
    config = load_config(path, reactor=MemoryReactor())
    assert (config.routing.max_hops, config.routing.max_backlog,
            config.routing.reroute_delay_ms) == (4, 10, 2000)
    assert config.store.sync == "normal"
    assert config.clients.endpoint == ("tcp:6001:interface=127.0.0.1",)


def test_store_sync_must_be_full_or_normal(write):
    path = write(ROUTER + "[store]\nsync = \"off\"\n")
    assert_refused(path, "store.sync", "full, normal")


def test_the_store_writer_is_adaptive_unless_configured(write):
    assert load_config(write(ROUTER), reactor=MemoryReactor()).store.writer == "adaptive"
    for writer in ("reactor", "thread"):
        config = load_config(write(ROUTER + f"[store]\nwriter = \"{writer}\"\n"),
                             reactor=MemoryReactor())
        assert config.store.writer == writer
    assert_refused(write(ROUTER + "[store]\nwriter = \"disk\"\n"), "store.writer",
                   "adaptive, reactor, thread")


def test_max_hops_at_least_one(write):
    path = write(ROUTER + "[routing]\nmax-hops = 0\n")
    assert_refused(path, "routing.max-hops", "at least 1")


def test_unknown_listener_key(write):
    path = write(ROUTER + LISTENER + "keepalive-intervall = 100\n")
    key = "routing.listener.keepalive-intervall"
    assert_refused(path, key, "unknown key", "keepalive-interval")


def test_unknown_connector_key(write):
    path = write(ROUTER + CONNECTOR + CONNECTOR.replace("router-b", "router-c") + "foo = 1\n")
    assert_refused(path, "routing.connector[1].foo", "unknown key")


def test_missing_required_key(write):
    path = write(ROUTER + "[routing.listener]\npassword-file = 'x'\n")
    assert_refused(path, "routing.listener.endpoint", "missing")


def test_missing_router_section(write):
    assert_refused(write(ADMIN), "router", "missing")


def test_admin_requires_endpoint(write):
    assert_refused(write(ROUTER + "[admin]\n"), "admin.endpoint", "missing")


def test_connector_must_be_array_of_tables(write):
    path = write(ROUTER + CONNECTOR.replace("[[routing.connector]]", "[routing.connector]"))
    assert_refused(path, "routing.connector", "[[routing.connector]]")


def test_missing_password_file(write, tmp_path):
    missing = tmp_path / "nope"
    path = write(ROUTER + CONNECTOR.replace("{secret}", str(missing)))
    assert_refused(path, "routing.connector[0].password-file", str(missing))


def test_empty_password_file(write, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    path = write(ROUTER + LISTENER.replace("{secret}", str(empty)))
    assert_refused(path, "routing.listener.password-file", "empty")


@pytest.mark.parametrize(
    "section, key",
    [
        (LISTENER, "routing.listener.endpoint"),
        (CONNECTOR, "routing.connector[0].endpoint"),
        (ADMIN, "admin.endpoint"),
    ],
)
def test_bad_endpoint(write, section, key):
    path = write(ROUTER + section.replace("tcp:", "bogus:"))
    assert_refused(path, key, "bogus", "Unknown endpoint type")


# -- a connector's endpoint list ----------------------------------------------------

PAIR = '["tcp:127.0.0.1:7002", "tcp:127.0.0.1:7102"]'


def test_connector_endpoint_list(write):
    """
    A connector to a pair (or a router at two addresses) lists both
    endpoints, tried in turn; a single string is a one-item list.
    """
    path = write(ROUTER + CONNECTOR.replace('"tcp:127.0.0.1:7002"', PAIR)
                 + CONNECTOR.replace("router-b", "router-c"))
    first, second = load(path).connectors
    assert first.endpoint == ("tcp:127.0.0.1:7002", "tcp:127.0.0.1:7102")
    assert second.endpoint == ("tcp:127.0.0.1:7002",)


def test_connector_endpoint_list_round_trip(write):
    config = load(write(ROUTER + CONNECTOR.replace('"tcp:127.0.0.1:7002"', PAIR)))
    text = format_config(config)
    assert f"endpoint = {PAIR}" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


@pytest.mark.parametrize(
    "endpoints, key, fragments",
    [
        ('["tcp:127.0.0.1:7002", "bogus:1"]', "routing.connector[0].endpoint[1]",
         ("bogus", "Unknown endpoint type")),
        ('["tcp:127.0.0.1:99999"]', "routing.connector[0].endpoint[0]", ("99999", "port")),
        ('["tcp:127.0.0.1:7002", "tcp:7003:interface=127.0.0.1"]',
         "routing.connector[0].endpoint[1]", ("tcp:7003",)),
        ('["tcp:127.0.0.1:7002", 7003]', "routing.connector[0].endpoint[1]",
         ("non-empty string", "7003")),
        ('["tcp:127.0.0.1:7002", ""]', "routing.connector[0].endpoint[1]",
         ("non-empty string",)),
        ("[]", "routing.connector[0].endpoint", ("non-empty list",)),
        ('["tcp:127.0.0.1:7002", "tcp:127.0.0.1:7002"]', "routing.connector[0].endpoint",
         ("repeated",)),
        ("7002", "routing.connector[0].endpoint", ("non-empty list", "int 7002")),
    ],
)
def test_connector_endpoint_list_refused(write, endpoints, key, fragments):
    """
    Each endpoint of the list is checked as a single one is, and the error
    names the file, the key and the index.
    """
    path = write(ROUTER + CONNECTOR.replace('"tcp:127.0.0.1:7002"', endpoints))
    assert_refused(path, key + ":", *fragments)


def test_client_endpoint_as_listener_endpoint(write):
    path = write(ROUTER + LISTENER.replace("tcp:7001:interface=127.0.0.1", "tcp:127.0.0.1:7001"))
    assert_refused(path, "routing.listener.endpoint", "tcp:127.0.0.1:7001")


def test_relative_paths_are_relative_to_working_directory(write, tmp_path, monkeypatch):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "mesh").write_text("relative\n")
    monkeypatch.chdir(tmp_path)
    config = load(write(ROUTER + LISTENER.replace("{secret}", "secrets/mesh")))
    assert config.listener.password_file == "secrets/mesh"
    assert config.listener.secret == b"relative"
    assert config.data_dir == "var/router-a"


def test_duplicate_connectors(write):
    path = write(ROUTER + CONNECTOR + CONNECTOR)
    assert_refused(path, "routing.connector[1].router", "router-b")


def test_connector_to_own_name(write):
    path = write(ROUTER + CONNECTOR.replace("router-b", "router-a"))
    assert_refused(path, "routing.connector[0].router", "itself")


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "router/a", "é"])
def test_invalid_router_name(write, name):
    path = write(ROUTER.replace('"router-a"', f'"{name}"'))
    assert_refused(path, "router.name")


def test_max_retry_interval_below_retry_interval(write):
    path = write(ROUTER + CONNECTOR + "retry-interval = 5000\n")
    assert_refused(path, "routing.connector[0].max-retry-interval", "5000")


def test_reconnect_attempts_below_minus_one(write):
    path = write(ROUTER + CONNECTOR + "reconnect-attempts = -2\n")
    assert_refused(path, "routing.connector[0].reconnect-attempts", "-2")


@pytest.mark.parametrize(
    "value, key",
    [
        ("[]", "routing.listener.allowed-routers"),
        ('"router-b"', "routing.listener.allowed-routers"),
        ('["router-b", "bad name"]', "routing.listener.allowed-routers[1]"),
        ('["router-b", 3]', "routing.listener.allowed-routers[1]"),
        ('["router-b", "router-b"]', "routing.listener.allowed-routers"),
    ],
)
def test_bad_allowed_routers(write, value, key):
    path = write(ROUTER + LISTENER + f"allowed-routers = {value}\n")
    assert_refused(path, key)


def test_toml_syntax_error(write):
    path = write(ROUTER + "[routing.listener\n")
    error = assert_refused(path, "line 5")
    assert error.key is None


def test_missing_config_file(tmp_path):
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(path) in str(info.value)


def test_global_reactor_used_by_default(write):
    assert load_config(write(ROUTER + ADMIN)).admin.endpoint == "tcp:8001:interface=127.0.0.1"


def test_format_config_round_trip(write, tmp_path):
    path = write(
        ROUTER.replace("var/router-a", r"var/odd \"dir\" \\ \u00e9\t\u007f")
        + LISTENER
        + 'keepalive-interval = "1.5s"\nallowed-routers = ["router-b"]\n'
        + CONNECTOR
        + "retry-interval-multiplier = 1.5\nmax-retry-interval = 30000\n"
        + CONNECTOR.replace("router-b", "router-c")
        + ADMIN
    )
    config = load(path)
    assert config.data_dir == 'var/odd "dir" \\ \u00e9\t\x7f'
    text = format_config(config)
    assert SECRET not in text
    assert SECRET not in repr(config)
    assert "keepalive-interval = 1500" in text
    assert "max-retry-interval = 30000" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


def test_format_config_minimal_round_trip(write):
    config = load(write(ROUTER))
    again = load(write(format_config(config), name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


@given(st.integers(min_value=0, max_value=10**12))
def test_duration_round_trip(n):
    assert parse_duration_ms(n, path="f.toml", key="k") == n
    assert parse_duration_ms(f"{n}ms", path="f.toml", key="k") == n
    assert parse_duration_ms(f"{n}s", path="f.toml", key="k") == n * 1000


@given(
    st.one_of(
        st.booleans(),
        st.floats(),
        st.none(),
        st.integers(max_value=-1),
        st.text().filter(lambda s: not s[:1].isdigit()),
    )
)
def test_duration_rejects_garbage(value):
    with pytest.raises(ConfigError) as info:
        parse_duration_ms(value, path="f.toml", key="routing.listener.keepalive-interval")
    assert "f.toml" in str(info.value)
    assert "routing.listener.keepalive-interval" in str(info.value)


# -- client sessions: [clients.listener] and [clients.reconnect] ---------------

CLIENTS = """
[clients.listener]
endpoint = "tcp:6001:interface=127.0.0.1"
"""


def test_client_session_defaults(write):
    config = load(write(ROUTER + CLIENTS))
    assert (config.clients.connection_ttl_override,
            config.clients.connection_ttl_check_interval_ms,
            config.clients.duplicate_id_window_ms,
            config.clients.send_answer_hold_ms) == (-1, 2000, 3_600_000, 2)
    reconnect = config.client_reconnect
    assert (reconnect.keep_alive_ms, reconnect.max_depth, reconnect.max_depth_policy,
            reconnect.recovery_buffer_size) == (60000, 1000, "drop-oldest", 64)
    # [clients.reconnect] has its defaults without a client listener too.
    assert load(write(ROUTER)).client_reconnect == reconnect


def test_the_client_listener_listens_on_one_endpoint_or_a_list(write):
    dual = '["tcp:6001:interface=127.0.0.1", "tcp6:6001:interface=\\\\:\\\\:1"]'
    config = load(write(ROUTER + CLIENTS.replace('"tcp:6001:interface=127.0.0.1"', dual)))
    assert config.clients.endpoint == ("tcp:6001:interface=127.0.0.1",
                                       "tcp6:6001:interface=\\:\\:1")
    text = format_config(config)
    assert f"endpoint = {dual}" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


@pytest.mark.parametrize("endpoints, key, fragments", [
    ('["tcp:6001:interface=127.0.0.1", "tcp:127.0.0.1:6002"]',
     "clients.listener.endpoint[1]", ("invalid server endpoint", "tcp:127.0.0.1:6002")),
    ('["tcp:6001:interface=127.0.0.1", "tcp:6001:interface=127.0.0.1"]',
     "clients.listener.endpoint", ("repeated",)),
    ("[]", "clients.listener.endpoint", ("a server endpoint string or a non-empty list",)),
])
def test_a_bad_client_listener_endpoint_list_names_its_key(write, endpoints, key, fragments):
    path = write(ROUTER + CLIENTS.replace('"tcp:6001:interface=127.0.0.1"', endpoints))
    assert_refused(path, key + ":", *fragments)


def test_client_session_explicit_values(write):
    config = load(write(
        ROUTER + CLIENTS
        + 'connection-ttl-override = 5000\nconnection-ttl-check-interval = "500ms"\n'
        + 'duplicate-id-window = "2h"\nsend-answer-hold = 0\n'
        + '[clients.reconnect]\nkeep-alive = "30s"\nmax-depth = 0\n'
        + 'max-depth-policy = "drop-newest"\nrecovery-buffer-size = 0\n'))
    assert (config.clients.connection_ttl_override,
            config.clients.connection_ttl_check_interval_ms,
            config.clients.duplicate_id_window_ms,
            config.clients.send_answer_hold_ms) == (5000, 500, 7_200_000, 0)
    reconnect = config.client_reconnect
    assert (reconnect.keep_alive_ms, reconnect.max_depth, reconnect.max_depth_policy,
            reconnect.recovery_buffer_size) == (30000, 0, "drop-newest", 0)


@pytest.mark.parametrize(
    "section, key, value, fragment",
    [
        ("clients.listener", "connection-ttl-override", -2, "at least -1"),
        ("clients.listener", "connection-ttl-override", '"5s"', "integer"),
        ("clients.listener", "connection-ttl-check-interval", 0, "at least 1"),
        ("clients.listener", "duplicate-id-window", '"forever"', "expected"),
        ("clients.listener", "send-answer-hold", -1, "negative"),
        ("clients.reconnect", "keep-alive", -1, "negative"),
        ("clients.reconnect", "max-depth", -1, "at least 0"),
        ("clients.reconnect", "max-depth-policy", '"drop-all"', "drop-oldest, drop-newest"),
        ("clients.reconnect", "recovery-buffer-size", "true", "integer"),
        ("clients.reconnect", "keep-alives", 1, "unknown key"),
    ],
)
def test_client_session_refusals(write, section, key, value, fragment):
    head = CLIENTS if section == "clients.listener" else "[clients.reconnect]\n"
    assert_refused(write(ROUTER + head + f"{key} = {value}\n"), f"{section}.{key}", fragment)


def test_unknown_clients_table(write):
    assert_refused(write(ROUTER + "[clients.reconnecting]\n"), "clients.reconnecting",
                   "listener, queue-depth, reconnect")


def test_queue_depth_defaults_to_max_depth_and_may_not_exceed_it(write):
    # None: max-depth's value (SessionSettings resolves it).
    assert load(write(ROUTER)).client_queue.queue_depth is None
    config = load(write(ROUTER + "[clients]\nqueue-depth = 10\n"
                        "[clients.reconnect]\nmax-depth = 50\n"))
    assert config.client_queue.queue_depth == 10
    text = format_config(config)
    assert "[clients]\nqueue-depth = 10\n" in text
    assert load(write(text)) == config
    assert_refused(write(ROUTER + "[clients]\nqueue-depth = 51\n"
                         "[clients.reconnect]\nmax-depth = 50\n"),
                   "clients.queue-depth", "max-depth (50)")
    assert_refused(write(ROUTER + "[clients]\nqueue-depth = -1\n"), "clients.queue-depth")


def test_client_session_keys_round_trip(write):
    config = load(write(
        ROUTER + CLIENTS + "connection-ttl-override = 0\n"
        + '[clients.reconnect]\nkeep-alive = "1.5s"\nmax-depth-policy = "drop-newest"\n'))
    text = format_config(config)
    assert "[clients.reconnect]" in text and "keep-alive = 1500" in text
    assert "duplicate-id-window = 3600000" in text
    again = load(write(text, name="effective.toml"))
    assert again == dataclasses.replace(config, path=again.path)


# -- ranges: a number the router cannot use is refused at load -----------------

HUGE = 99999999999999999999


@pytest.mark.parametrize(
    "section, key, value, fragment",
    [
        (CLIENTS, "clients.listener.connection-ttl-override", HUGE, "at most 86400000"),
        (CLIENTS, "clients.listener.connection-ttl-check-interval", '"2h"', "at most 3600000 ms"),
        (CLIENTS, "clients.listener.duplicate-id-window", '"721h"', "at most 2592000000 ms"),
        (CLIENTS, "clients.listener.send-answer-hold", '"2s"', "at most 1000 ms"),
        (LISTENER, "routing.listener.keepalive-interval", HUGE, "at most 3600000 ms"),
        (LISTENER, "routing.listener.stage-valid-timeout", '"2h"', "at most 3600000 ms"),
        (LISTENER, "routing.listener.reject-disconnect-delay", '"2h"', "at most 3600000 ms"),
        (CONNECTOR, "routing.connector[0].retry-interval", '"2h"', "at most 3600000 ms"),
        (CONNECTOR, "routing.connector[0].max-retry-interval", '"2h"', "at most 3600000 ms"),
        (CONNECTOR, "routing.connector[0].retry-interval-multiplier", 101, "at most 100.0"),
        (CONNECTOR, "routing.connector[0].reconnect-attempts", HUGE, "at most 2147483647"),
        ("[routing]\n", "routing.max-hops", 256, "at most 255"),
        ("[routing]\n", "routing.max-backlog", 10**10, "at most 1000000000"),
        ("[routing]\n", "routing.max-transient-backlog", 10**8, "at most 10000000"),
        ("[routing]\n", "routing.reroute-delay", '"2h"', "at most 3600000 ms"),
        ("[clients.reconnect]\n", "clients.reconnect.keep-alive", '"25h"', "at most 86400000 ms"),
        ("[clients.reconnect]\n", "clients.reconnect.max-depth", 10**8, "at most 10000000"),
        ("[clients.reconnect]\n", "clients.reconnect.recovery-buffer-size", 10**7,
         "at most 100000"),
    ],
)
def test_maximums(write, section, key, value, fragment):
    """
    Every number has an upper bound: past it the router would fail at run
    time (an OverflowError for every client, links that never form) or
    hold memory no machine has.
    """
    path = write(ROUTER + section + f"{key.rsplit('.', 1)[1]} = {value}\n")
    assert_refused(path, key, fragment)


@pytest.mark.parametrize(
    "section, key, endpoint",
    [
        (LISTENER, "routing.listener.endpoint", "tcp:99999"),
        (LISTENER, "routing.listener.endpoint", "tcp:port=65536:interface=127.0.0.1"),
        (CONNECTOR, "routing.connector[0].endpoint", "tcp:127.0.0.1:99999"),
        (CONNECTOR, "routing.connector[0].endpoint", "tcp:host=127.0.0.1:port=0"),
        (CONNECTOR, "routing.connector[0].endpoint", "tls:host=b.example:port=70000"),
        (ADMIN, "admin.endpoint", "tcp:-1"),
        (CLIENTS, "clients.listener.endpoint", "tcp:123456:interface=127.0.0.1"),
    ],
)
def test_endpoint_port_out_of_range(write, section, key, endpoint):
    original = {LISTENER: "tcp:7001:interface=127.0.0.1", CONNECTOR: "tcp:127.0.0.1:7002",
                ADMIN: "tcp:8001:interface=127.0.0.1", CLIENTS: "tcp:6001:interface=127.0.0.1"}
    path = write(ROUTER + section.replace(original[section], endpoint))
    assert_refused(path, key, endpoint, "port")


def test_endpoint_ports_in_range_are_accepted(write):
    config = load(write(ROUTER + LISTENER.replace("7001", "65535")
                        + CONNECTOR.replace("7002", "1") + ADMIN.replace("8001", "0")))
    assert config.listener.endpoint.startswith("tcp:65535")


@pytest.mark.parametrize("below", ["", "/store"])
def test_a_data_dir_below_a_file_is_refused(write, tmp_path, below):
    """
    check-config catches what would stop the router at start: a data-dir
    that is a file, or below one.
    """
    (tmp_path / "a-file").write_text("not a directory\n")
    path = write(ROUTER.replace("var/router-a", str(tmp_path / "a-file") + below))
    assert_refused(path, "router.data-dir", "a-file", "not a directory")


def test_client_ca_needs_an_ssl_endpoint_and_a_certificate(write, tmp_path):
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    tcp = write(ROUTER + f"""
[clients.listener]
endpoint = "tcp:6001:interface=127.0.0.1"
client-ca = "{not_pem}"
""")
    assert_refused(tcp, "clients.listener.client-ca", "need an ssl: endpoint")
    key, cert = make_server_cert(tmp_path, *make_ca(tmp_path / "server-ca", "test CA"))
    ssl = f"ssl:6001:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    for ca, fragment in ((not_pem, "holds no PEM certificate"),
                         (tmp_path / "missing.pem", "cannot read")):
        path = write(ROUTER + f"""
[clients.listener]
endpoint = "{ssl}"
client-ca = "{ca}"
""")
        assert_refused(path, "clients.listener.client-ca", fragment)


# -- [events] ----------------------------------------------------------------


def test_events_defaults_rotate_at_64_mib_and_keep_every_file(write):
    assert load(write(ROUTER)).events == RotationSettings(
        max_file_size=64 * 1024 * 1024, max_age_ms=None, retain=None)


@pytest.mark.parametrize(
    "value, expected",
    [(4096, 4096), ('"1 MiB"', 1024**2), ('"512KiB"', 512 * 1024), ('"1.5 GiB"', 3 * 1024**3 // 2),
     ('"2048 B"', 2048), ('"1 TiB"', 1024**4)],
)
def test_events_max_file_size_forms(write, value, expected):
    assert load(write(ROUTER + f"[events]\nmax-file-size = {value}\n")).events.max_file_size == (
        expected)


@pytest.mark.parametrize(
    "key, value, fragment",
    [("max-file-size", '"1 MB"', '"64 MiB"'), ("max-file-size", '"0.5 B"', "whole number"),
     ("max-file-size", "1.5", "integer bytes"), ("max-file-size", "true", "integer bytes"),
     ("max-file-size", 1023, "at least 1024 bytes"), ("max-file-size", '"2 TiB"', "at most"),
     ("max-age", '"1d"', "500ms"), ("max-age", '"50ms"', "at least 100 ms"),
     ("retain", 0, "at least 1"), ("retain", '"ten"', '"64 MiB"'),
     ("retain", "1.5", "a number of files or a total size"),
     ("rotate", 1, "unknown key")],
)
def test_bad_events_values_name_the_key(write, key, value, fragment):
    assert_refused(write(ROUTER + f"[events]\n{key} = {value}\n"), f"events.{key}", fragment)


def test_retain_counts_files_or_bytes_and_round_trips(write):
    by_count = load(write(ROUTER + '[events]\nretain = 20\nmax-age = "1m"\n'))
    assert by_count.events.retain == 20 and not isinstance(by_count.events.retain, RetainBytes)
    assert by_count.events.max_age_ms == 60_000
    by_size = load(write(ROUTER + '[events]\nretain = "10 GiB"\n'))
    assert isinstance(by_size.events.retain, RetainBytes)
    assert by_size.events.retain == 10 * 1024**3
    for config in (by_count, by_size):
        again = load(write(format_config(config), name="effective.toml"))
        assert again == dataclasses.replace(config, path=again.path)
        assert isinstance(again.events.retain, RetainBytes) == isinstance(
            config.events.retain, RetainBytes)
