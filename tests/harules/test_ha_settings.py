"""
Tests for L{meshroute.harules.settings}: the defaults and the rules that judge
a combination of HA settings.
"""

from dataclasses import replace

import pytest

from meshroute.errors import Problem
from meshroute.harules.settings import (
    HASettings,
    ReplicationSettings,
    WitnessSettings,
    errors,
    listeners_clash,
    warnings,
)

REPLICATION = ReplicationSettings(
    "tcp:7102:interface=127.0.0.1", "tcp:127.0.0.1:7202", "secrets/mesh"
)
WITNESS_A = WitnessSettings("router-a", "tcp:127.0.0.1:7001")
GOOD = HASettings("primary", "router-b", REPLICATION, (WITNESS_A,))


def test_defaults_are_the_issues():
    assert (GOOD.heartbeat_interval_ms, GOOD.lease_timeout_ms, GOOD.replication_timeout_ms) == (
        500, 3000, 5000)
    assert GOOD.replica_sync == "full"
    assert GOOD.allow_failback and GOOD.restart_backup and GOOD.failover_on_shutdown
    assert GOOD.initial_replication_sync_timeout_ms == 30000
    assert GOOD.max_saved_replicated_journals_size == 2
    assert GOOD.voters == 3


def test_the_issues_example_is_usable_and_quiet():
    assert errors(GOOD, "router-b") == []
    assert warnings(GOOD) == []


def keys(problems: list[Problem]) -> list[str]:
    return [problem.key for problem in problems]


def test_lease_timeout_is_at_most_an_hour():
    problems = errors(replace(GOOD, lease_timeout_ms=3_600_001), "router-b")
    assert [(p.key, p.message) for p in problems] == [
        ("ha.lease-timeout", "must be at most 3600000 ms (1 h), got 3600001 ms")]
    assert errors(replace(GOOD, lease_timeout_ms=3_600_000), "router-b") == []


def test_lease_timeout_must_exceed_two_heartbeats():
    problems = errors(replace(GOOD, lease_timeout_ms=1000), "router-b")
    assert problems == [Problem(
        "ha.lease-timeout", "must exceed 2 × heartbeat-interval (1000 ms), got 1000 ms")]
    assert errors(replace(GOOD, lease_timeout_ms=1001), "router-b") == []


def test_replication_timeout_must_exceed_two_heartbeats():
    bad = replace(GOOD, heartbeat_interval_ms=2500)
    assert keys(errors(bad, "router-b")) == ["ha.lease-timeout", "ha.replication-timeout"]


@pytest.mark.parametrize("change,key", [
    ({"role": "live"}, "ha.role"),
    ({"group_name": "router b"}, "ha.group-name"),
    ({"replica_sync": "async"}, "ha.replica-sync"),
    ({"heartbeat_interval_ms": 0}, "ha.heartbeat-interval"),
    ({"initial_replication_sync_timeout_ms": 0}, "ha.initial-replication-sync-timeout"),
    ({"max_saved_replicated_journals_size": -1}, "ha.max-saved-replicated-journals-size"),
])
def test_each_impossible_value_names_its_key(change, key):
    assert keys(errors(replace(GOOD, **change), "router-b")) == [key]


def test_the_router_itself_cannot_be_its_witness():
    bad = replace(GOOD, witnesses=(WITNESS_A, WitnessSettings("router-b", "tcp:h:1")))
    assert keys(errors(bad, "router-b")) == ["ha.witness[1].router"]


def test_a_witness_listed_twice_is_refused():
    bad = replace(GOOD, witnesses=(WITNESS_A, WITNESS_A))
    assert keys(errors(bad, "router-b")) == ["ha.witness[1].router"]


def test_no_witnesses_warns_that_failover_is_impossible():
    (warning,) = warnings(replace(GOOD, witnesses=()))
    assert warning.key == "ha.witness" and "no automatic failover" in warning.message


def test_an_even_number_of_voters_warns():
    two = (WITNESS_A, WitnessSettings("router-c", "tcp:127.0.0.1:7003"))
    (warning,) = warnings(replace(GOOD, witnesses=two))
    assert warning.key == "ha.witness" and "4 voters need a majority of 3" in warning.message


def test_normal_replica_sync_warns_what_it_risks():
    (warning,) = warnings(replace(GOOD, replica_sync="normal"))
    assert warning.key == "ha.replica-sync" and "fsync" in warning.message


@pytest.mark.parametrize("one, other, clash", [
    ("tcp:7102:interface=127.0.0.1", "tcp:port=7102:interface=127.0.0.1", True),
    ("tcp:7102", "tcp:7102:interface=127.0.0.1", True),  # every interface holds it
    ("tcp6:7102:interface=\\:\\:", "tcp:7102:interface=10.0.0.1", True),
    ("ssl:7102:privateKey=k.pem", "tcp:7102", True),
    ("tcp:7102:interface=127.0.0.1", "tcp:7102:interface=127.0.0.2", False),
    ("tcp:7102:interface=127.0.0.1", "tcp:7103:interface=127.0.0.1", False),
    ("tcp:0:interface=127.0.0.1", "tcp:0:interface=127.0.0.1", False),  # any free port
    ("unix:/run/b.sock", "unix:address=/run/b.sock", True),
    ("unix:/run/b.sock", "unix:/run/c.sock", False),
    ("unix:/run/7102", "tcp:7102", False),
    ("systemd:domain=INET:index=0", "systemd:domain=INET:index=0", False),  # not read
])
def test_which_listeners_clash_in_one_process(one, other, clash):
    assert listeners_clash(one, other) is clash
    assert listeners_clash(other, one) is clash
