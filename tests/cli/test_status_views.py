"""
Tests for L{meshroute.cli.status_views}: the table formatter and the
views' columns, without a router; and how C{meshroute status} finds an
admin API in a router's configuration (L{meshroute.cli.status_command}).
"""

import pytest

from meshroute.cli.status_command import admin_url, format_links
from meshroute.cli.status_views import (
    age,
    format_table,
    format_view,
    last_topology_change,
    patterns,
)
from meshroute.router.admin_settings import AdminConfig
from meshroute.errors import ConfigError


def test_columns_are_as_wide_as_their_widest_cell():
    table = format_table(["name", "depth"], [["orders", 3], ["a-much-longer-name", 12345]],
                         numeric=[False, True], indent="")
    assert table.splitlines() == [
        "name                depth",
        "orders                  3",
        "a-much-longer-name  12345",
    ]


def test_missing_values_show_a_dash_and_lines_have_no_trailing_spaces():
    table = format_table(["peer", "last close"], [["router-b", None], [None, "keepalive"]])
    assert table.splitlines() == [
        "  peer      last close",
        "  router-b  -",
        "  -         keepalive",
    ]


@pytest.mark.parametrize("seconds, shown", [
    (0, "0s"), (59.9, "59s"), (60, "1m00s"), (3599, "59m59s"), (3600, "1h00m"),
    (86400 + 4 * 3600, "1d04h"), (-5, "0s"),
])
def test_ages_are_compact(seconds, shown):
    assert age(1000.0 - seconds, 1000.0) == shown


def test_a_view_with_a_router_column():
    links = {
        "router-a": [{"peer": "router-b", "direction": "connector", "stage": "delivery",
                      "since": 990.0, "keepalive_interval_ms": 200, "keepalive_counter": 5,
                      "in_flight": 0, "sent": 1000, "received": 7,
                      "last_close_reason": "keepalive", "last_closed_at": 900.0}],
        "router-bee": [{"peer": "router-a", "direction": "listener", "stage": "recovery",
                        "since": 999.0, "keepalive_interval_ms": None,
                        "keepalive_counter": None, "in_flight": None, "sent": None,
                        "received": None, "last_close_reason": None}],
    }
    lines = format_view("links", links, now=1000.0, router_column=True).splitlines()
    assert lines == [
        "  router      peer      direction  stage     since  keepalive  counter  in flight"
        "  sent  received  last close",
        "  router-a    router-b  connector  delivery    10s     200 ms        5          0"
        "  1000         7  keepalive 1m40s ago",
        "  router-bee  router-a  listener   recovery     1s          -        -          -"
        "     -         -  -",
    ]


def test_each_view_has_its_columns():
    now = 1000.0
    queues = format_view("queues", {"": [{"name": "orders", "depth": 2, "consumers": 1,
                                          "unacknowledged": 1, "in_rate": 12.25,
                                          "out_rate": 0.0}]}, now)
    assert queues.split() == ["queue", "depth", "consumers", "unacked", "in/s", "out/s",
                              "orders", "2", "1", "1", "12.2", "0.0"]
    sessions = format_view("sessions", {"": [{"client_id": "c1", "user": None,
                                              "state": "open", "ttl_ms": 60000,
                                              "queued": 0}]}, now)
    assert sessions.split() == ["client", "user", "protocol", "state", "ttl", "queued",
                                "c1", "-", "native", "open", "60000", "ms", "0"]
    routers = [{"name": "router-a", "reachable": True, "next_hop": None, "hops": 0,
                "link": None, "stage": None, "last_change": 940.0, "last_close_reason": None},
               {"name": "router-c", "reachable": False, "next_hop": None, "hops": None,
                "link": None, "stage": None, "last_change": 970.0,
                "last_close_reason": "keepalive"}]
    table = format_view("routers", {"": routers}, now)
    assert table.splitlines()[2].split() == ["router-c", "no", "-", "-", "-", "-", "30s",
                                             "keepalive"]
    assert last_topology_change(routers, now) == (
        "last topology change: 30s ago (router-c's links)\n")
    assert format_view("sessions", {"": []}, now) == "  no sessions\n"


def topics_of(router: str, advertised: list[str], version: int, subscriptions=(),
              interest=(), waiting: int = 0, held: int | None = None) -> dict:
    """
    A C{/api/v1/topics} answer.
    """
    return {"router": router, "subscriptions": list(subscriptions),
            "advertised": {"version": version, "patterns": advertised},
            "interest": list(interest),
            "fan_out": {"waiting": waiting, "publications": {"client": 7, "link": 2},
                        "copies": {"durable": 3, "non-durable": 1, "link": 9},
                        "holding": held is not None, "publishers_held": held or 0,
                        "hold_at": 4096},
            "retained": {"count": 2, "bytes": 40, "cleared": 1, "max_count": 10000,
                         "max_bytes": 67108864}}


DURABLE = {"queue": "$durable:app:prices", "pattern": "prices.#", "durable": True,
           "client_id": "app", "name": "prices", "shared": True, "consumers": 0,
           "depth": 1200, "unacknowledged": 0}
NON_DURABLE = {"queue": "$subscriber:3", "pattern": "orders.*", "durable": False,
               "client_id": None, "name": None, "shared": False, "consumers": 1, "depth": 0,
               "unacknowledged": 2}


def test_the_topics_of_one_router():
    topics = topics_of("router-c", ["orders.*", "prices.#"], 1795458725123,
                       [DURABLE, NON_DURABLE],
                       [{"router": "router-a", "version": 1795458700000,
                         "patterns": ["a", "b", "c", "d", "e", "f"], "reachable": True},
                        {"router": "router-b", "version": 12, "patterns": [],
                         "reachable": False}], waiting=4)

    assert format_view("topics", {"": topics}, 1000.0).splitlines() == [
        "advertised: orders.*, prices.# (version 1795458725123)",
        "fan-out: 4 waiting; publications 7 from clients, 2 from links; copies 3 durable, "
        "1 non-durable, 9 to other routers",
        "retained: 2 messages of max 10000, 40 bytes, 1 cleared topics",
        "subscriptions:",
        "  subscription   pattern   durable  shared  consumers  depth  unacked",
        "  app:prices     prices.#  yes      yes             0   1200        0",
        "  $subscriber:3  orders.*  no       no              1      0        2",
        "interest held of other routers:",
        "  router    reachable        version  patterns",
        "  router-a  yes        1795458700000  a, b, c, d +2 more",
        "  router-b  no                    12  -",
    ]


def test_held_topic_publishers_are_shown_while_held():
    topics = topics_of("router-c", [], 1, waiting=5000, held=3)
    assert format_view("topics", {"": topics}, 1000.0).splitlines()[1] == (
        "fan-out: 5000 waiting; publishers held (3 sessions, hold-publishers-at 4096); "
        "publications 7 from clients, 2 from links; copies 3 durable, 1 non-durable, "
        "9 to other routers")


def test_the_topics_of_a_router_without_any():
    topics = topics_of("router-b", [], 0)
    del topics["retained"]  # nor retained messages: a router older than them
    lines = format_view("topics", {"": topics}, 1000.0).splitlines()

    assert lines[0] == "advertised: - (version 0)"
    assert lines[2:] == ["subscriptions:", "  no topic subscriptions",
                         "interest held of other routers:", "  no interest of other routers"]


def test_the_topics_of_every_router_say_who_holds_whose_interest():
    version_a, version_c = 1795458700000, 1795458725123
    a = topics_of("router-a", ["x.#"], version_a,
                  interest=[{"router": "router-c", "version": version_c,
                             "patterns": ["prices.#"], "reachable": True}])
    # router-b has not heard router-a's newest interest yet.
    b = topics_of("router-b", [], 0, interest=[
        {"router": "router-a", "version": version_a - 5, "patterns": [], "reachable": True},
        {"router": "router-c", "version": version_c, "patterns": ["prices.#"],
         "reachable": True}])
    c = topics_of("router-c", ["prices.#"], version_c, [DURABLE], waiting=2, interest=[
        {"router": "router-a", "version": version_a, "patterns": ["x.#"], "reachable": True}])

    lines = format_view("topics", {"router-a": a, "router-b": b, "router-c": c}, 1000.0,
                        router_column=True).splitlines()

    assert lines == [
        "subscriptions:",
        "  router    subscription  pattern   durable  shared  consumers  depth  unacked",
        "  router-c  app:prices    prices.#  yes      yes             0   1200        0",
        "advertised interest:",
        "  router          version  patterns  held by  waiting  published",
        "  router-a  1795458700000  x.#           1/2        0          7",
        "  router-b              0  -               -        0          7",
        "  router-c  1795458725123  prices.#      2/2        2          7",
    ]


def test_patterns_beyond_a_few_are_counted():
    assert patterns([]) == "-"
    assert patterns(["a", "b"]) == "a, b"
    assert patterns(["a", "b", "c", "d", "e"]) == "a, b, c, d +1 more"


@pytest.mark.parametrize("endpoint, url", [
    ("tcp:8001:interface=127.0.0.1", "http://127.0.0.1:8001"),
    ("tcp:port=8001", "http://127.0.0.1:8001"),
    ("tcp:8001:interface=\\:\\:1", "http://[::1]:8001"),
    ("ssl:8443:interface=127.0.0.1:privateKey=k.pem", "https://127.0.0.1:8443"),
])
def test_the_admin_url_of_a_configuration(endpoint, url):
    config = type("Config", (), {"path": "r.toml", "admin": AdminConfig(endpoint)})
    assert admin_url(config) == url


def test_a_unix_admin_endpoint_needs_admin_url():
    config = type("Config", (), {"path": "r.toml", "admin": AdminConfig("unix:/run/a.sock")})
    with pytest.raises(ConfigError, match="admin.endpoint"):
        admin_url(config)


def test_the_one_screen_shows_where_each_listener_is_bound():
    router = {"name": "router-a", "version": "1", "uptime_s": 3.0, "serving": True,
              "listeners": [
                  {"key": "stomp.listener.endpoint[0]", "endpoint": "tcp:0:interface=127.0.0.1",
                   "address": "127.0.0.1:40001", "port": 40001},
                  {"key": "stomp.listener.endpoint[1]",
                   "endpoint": "tcp6:0:interface=\\:\\:1", "address": "[::1]:40002",
                   "port": 40002},
                  {"key": "clients.listener.endpoint", "endpoint": "clients-a",
                   "address": None, "port": None}]}
    assert format_links(router, []).splitlines()[1:] == [
        "  listening on 127.0.0.1:40001 (stomp.listener.endpoint[0])",
        "  listening on [::1]:40002 (stomp.listener.endpoint[1])",
        "  no links",
    ]
