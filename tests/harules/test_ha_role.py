"""
Tests for L{meshroute.harules.role}: the HA role of one instance, with a
recording L{RoleActions} and a L{task.Clock}.

Each test walks one path of the transition table and checks what the
machine asked the router to do, in order, and the API state it reports.
"""

import pytest
from automat import NoTransition
from twisted.internet.task import Clock

from meshroute.harules.role import (
    ACTIVE_ALONE,
    ACTIVE_REPLICATED,
    BACKUP_IN_SYNC,
    BACKUP_SYNCING,
    FENCED,
    HANDING_OVER,
    LEASE_LOST,
    NO_MAJORITY,
    STARTING,
    STORE_FAILED,
    SUPERSEDED,
    start_role,
)
from meshroute.harules.settings import HASettings, ReplicationSettings, WitnessSettings

SETTINGS = HASettings(
    "backup",
    "router-b",
    ReplicationSettings("tcp:7202", "tcp:127.0.0.1:7102", "secrets/mesh"),
    (WitnessSettings("router-a", "tcp:127.0.0.1:7001"),),
)
LEASE = SETTINGS.lease_timeout_ms / 1000
REPLICATION = SETTINGS.replication_timeout_ms / 1000
HEARTBEAT = SETTINGS.heartbeat_interval_ms / 1000


class RecordingActions:
    """
    A L{RoleActions} that records every call as C{(name, *args)}.
    """

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.append(
            (name, *args, *kwargs.values())
        )

    def take(self) -> list[tuple]:
        calls, self.calls = self.calls, []
        return calls


class Instance:
    def __init__(self) -> None:
        self.clock = Clock()
        self.actions = RecordingActions()
        self.role, self.core = start_role(self.clock, SETTINGS, self.actions)

    def take(self) -> list[tuple]:
        return self.actions.take()


@pytest.fixture
def instance() -> Instance:
    made = Instance()
    assert made.take() == [("state_changed", STARTING), ("ask_voters",)]
    return made


def in_sync_backup(instance: Instance) -> Instance:
    instance.role.active_found()
    instance.role.caught_up()
    instance.take()
    return instance


def active_replicated(instance: Instance, epoch: int = 2) -> Instance:
    in_sync_backup(instance)
    instance.role.epoch_handed_over(epoch)
    instance.take()
    return instance


def fall_silent(instance: Instance, timeout: float) -> None:
    """
    The peer is heard once, 1 s in, then never again: nothing happens
    until C{timeout} after it was last heard.
    """
    instance.clock.advance(1.0)
    instance.role.peer_heard()
    instance.clock.advance(timeout - 0.5)
    assert instance.take() == []
    instance.clock.advance(0.5)


# -- starting -----------------------------------------------------------------


def test_a_starting_instance_follows_the_active(instance):
    instance.role.active_found()
    assert instance.take() == [("state_changed", BACKUP_SYNCING), ("follow",)]
    instance.role.caught_up()
    assert instance.take() == [("state_changed", BACKUP_IN_SYNC)]
    assert instance.core.state == BACKUP_IN_SYNC


def test_a_starting_instance_with_the_newest_data_resumes_alone(instance):
    instance.role.holds_newest_data()
    assert instance.take() == [("request_votes", True)]
    instance.role.epoch_granted(7)
    assert instance.take() == [("state_changed", ACTIVE_ALONE), ("start_serving", 7)]
    assert (instance.core.state, instance.core.epoch) == (ACTIVE_ALONE, 7)


def test_an_instance_told_to_wait_asks_again_a_heartbeat_later(instance):
    instance.role.must_wait()
    assert instance.take() == []
    instance.clock.advance(HEARTBEAT)
    assert instance.take() == [("ask_voters",)]


def test_a_lost_first_election_asks_the_voters_again(instance):
    instance.role.holds_newest_data()
    instance.take()
    instance.role.election_lost()
    instance.clock.advance(HEARTBEAT)
    assert instance.take() == [("ask_voters",)]
    assert instance.core.state == STARTING


def test_a_stale_instance_never_serves(instance):
    """
    Told to wait (stale, or the peer resumes), the instance only ever asks
    again, and an election result it did not ask for is refused.
    """
    for _ in range(5):
        instance.role.must_wait()
        instance.clock.advance(HEARTBEAT)
    assert set(instance.take()) == {("ask_voters",)}
    with pytest.raises(NoTransition):
        instance.role.epoch_granted(3)
    assert instance.take() == [] and instance.core.state == STARTING


# -- backup -------------------------------------------------------------------


def test_an_in_sync_backup_takes_over_when_the_active_falls_silent(instance):
    in_sync_backup(instance)
    fall_silent(instance, LEASE)
    assert instance.take() == [("request_votes", True)]
    instance.role.epoch_granted(3)
    assert instance.take() == [
        ("stop_following",), ("state_changed", ACTIVE_ALONE), ("start_serving", 3)]


def test_a_backup_refused_the_next_epoch_asks_who_is_active(instance):
    in_sync_backup(instance)
    instance.clock.advance(LEASE)
    instance.take()
    instance.role.election_lost()
    assert instance.take() == [("stop_following",), ("state_changed", STARTING), ("ask_voters",)]


def test_a_backup_still_catching_up_never_asks_for_votes(instance):
    instance.role.active_found()
    instance.take()
    instance.clock.advance(LEASE)
    assert instance.take() == [("stop_following",), ("state_changed", STARTING), ("ask_voters",)]
    with pytest.raises(NoTransition):
        instance.role.epoch_granted(3)


def test_a_backup_handed_the_active_place_serves_replicated(instance):
    in_sync_backup(instance)
    instance.role.epoch_handed_over(4)
    assert instance.take() == [("state_changed", ACTIVE_REPLICATED), ("start_serving", 4)]


def test_a_backup_handed_the_place_of_an_active_that_stops_serves_alone(instance):
    in_sync_backup(instance)
    instance.role.epoch_handed_over_alone(4)
    assert instance.take() == [("state_changed", ACTIVE_ALONE), ("start_serving", 4)]
    instance.clock.advance(LEASE * 10)  # no peer to watch
    assert instance.take() == []


# -- active -------------------------------------------------------------------


def test_an_active_that_loses_its_backup_holds_acks_until_it_may_run_alone(instance):
    active_replicated(instance)
    fall_silent(instance, REPLICATION)
    assert instance.take() == [("hold_acknowledgements",), ("request_votes", True)]
    assert instance.core.state == ACTIVE_REPLICATED
    instance.role.epoch_granted(3)
    assert instance.take() == [
        ("state_changed", ACTIVE_ALONE), ("serve_in", 3), ("release_acknowledgements",)]


def test_an_active_that_cannot_run_alone_fences_itself(instance):
    active_replicated(instance)
    instance.clock.advance(REPLICATION)
    instance.take()
    instance.role.election_lost()
    assert instance.take() == [
        ("stop_serving", NO_MAJORITY), ("state_changed", FENCED), ("ask_voters",)]


def test_a_returning_peer_is_readmitted_with_a_new_epoch(instance):
    active_replicated(instance)
    instance.clock.advance(REPLICATION)
    instance.role.epoch_granted(3)
    instance.take()
    instance.role.peer_caught_up()
    assert instance.take() == [("request_votes", False)]
    instance.role.election_lost()
    assert instance.core.state == ACTIVE_ALONE
    instance.role.peer_caught_up()
    instance.role.epoch_granted(4)
    assert instance.take() == [
        ("request_votes", False), ("state_changed", ACTIVE_REPLICATED), ("serve_in", 4)]
    assert instance.core.epoch == 4


@pytest.mark.parametrize("event,reason", [
    (lambda role: role.lease_lost(), LEASE_LOST),
    (lambda role: role.superseded(9), SUPERSEDED),
    (lambda role: role.store_failed(), STORE_FAILED),
])
def test_an_active_fences_itself_when_it_loses_its_place(instance, event, reason):
    active_replicated(instance)
    event(instance.role)
    assert instance.take() == [("stop_serving", reason), ("state_changed", FENCED), ("ask_voters",)]
    # Fenced, no timer is left to wake it.
    instance.clock.advance(10 * REPLICATION)
    assert instance.take() == []


def test_a_store_failure_after_the_instance_stopped_serving_changes_nothing(instance):
    """
    The router's store finishes what was queued as it closes: a commit
    that fails then reaches an instance that serves no more.
    """
    active_replicated(instance)
    instance.role.handover_due()
    instance.take()
    instance.role.store_failed()
    assert instance.take() == []
    instance.role.election_lost()
    instance.take()
    instance.role.store_failed()
    assert instance.take() == [] and instance.core.state == FENCED


def test_a_fenced_instance_rejoins_as_backup(instance):
    active_replicated(instance)
    instance.role.lease_lost()
    instance.take()
    instance.role.active_found()
    assert instance.take() == [("state_changed", BACKUP_SYNCING), ("follow",)]


def test_failback_hands_over_and_becomes_backup(instance):
    active_replicated(instance)
    instance.role.handover_due()
    assert instance.take() == [("stop_serving", HANDING_OVER), ("hand_over",)]
    instance.role.epoch_granted(5)
    assert instance.take() == [("state_changed", BACKUP_SYNCING), ("follow",)]


def test_a_failed_handover_fences_without_stopping_twice(instance):
    active_replicated(instance)
    instance.role.handover_due()
    instance.take()
    instance.role.election_lost()
    assert instance.take() == [("state_changed", FENCED), ("ask_voters",)]


def test_an_alone_active_cannot_hand_over(instance):
    instance.role.holds_newest_data()
    instance.role.epoch_granted(2)
    with pytest.raises(NoTransition):
        instance.role.handover_due()


def test_a_forced_activation_serves_alone_without_asking_the_voters():
    """
    C{meshroute ha force-activate}: at its next start the instance serves
    alone in the epoch it was given, and asks no voter first.
    """
    clock, actions = Clock(), RecordingActions()
    role, core = start_role(clock, SETTINGS, actions, forced_epoch=9)
    assert actions.take() == [("state_changed", STARTING), ("state_changed", ACTIVE_ALONE),
                              ("start_serving", 9)]
    assert (core.state, core.epoch) == (ACTIVE_ALONE, 9)
    # It is an ordinary active from then on: the returning peer is
    # readmitted, a lost lease fences it.
    role.peer_caught_up()
    assert actions.take() == [("request_votes", False)]
    role.lease_lost()
    assert core.state == FENCED


def test_a_forced_activation_is_only_at_start(instance):
    instance.role.active_found()
    with pytest.raises(NoTransition):
        instance.role.activation_forced(9)
