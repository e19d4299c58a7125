"""
Tests for L{meshroute.ha.handover}: a backup with C{allow-failback} hands
the router back once the primary acknowledged where the replicated epoch
began, and a stopping active with C{failover-on-shutdown} waits for its
hand-over at most a second.
"""

from automat import NoTransition
from twisted.internet.task import Clock

from meshroute.ha.handover import STOP_HAND_OVER_S, HandOver
from meshroute.harules import role
from meshroute.harules.quorum import LogPosition
from meshroute.harules.settings import BACKUP, PRIMARY, HASettings, ReplicationSettings

EPOCH = 4


class Replication:
    """
    The active's head position and its backup's lag.
    """

    def __init__(self, head: int, lag: int | None) -> None:
        self.head = head
        self.behind = lag

    def position(self) -> LogPosition:
        return LogPosition(EPOCH, self.head)

    def lag(self) -> int | None:
        return self.behind


class Role:
    """
    The role's C{handover_due}, and whether the instance still serves
    replicated in an epoch.
    """

    def __init__(self) -> None:
        self.due = 0
        self.refuses = False
        self.serving_in = EPOCH

    def handover_due(self) -> None:
        if self.refuses:
            raise NoTransition(role.ACTIVE_ALONE, "handover_due")
        self.due += 1

    def serves_replicated_in(self, epoch: int) -> bool:
        return epoch == self.serving_in


def settings(ha_role: str = BACKUP, **options) -> HASettings:
    return HASettings(role=ha_role, group_name="router-b",
                      replication=ReplicationSettings("tcp:7201", "tcp:7202", "(memory)", b"s"),
                      **options)


def hand_over(ha: HASettings, replication: Replication) -> tuple[Clock, Role, HandOver]:
    clock = Clock()
    the_role = Role()
    return clock, the_role, HandOver(clock, ha, "router-b/backup", replication,
                                     the_role.handover_due, the_role.serves_replicated_in)


def test_failback_waits_for_the_primary_to_acknowledge_where_the_epoch_began():
    replication = Replication(head=100, lag=30)
    clock, the_role, handover = hand_over(settings(allow_failback=True), replication)
    handover.serving(role.ACTIVE_REPLICATED, EPOCH)
    clock.advance(0)
    assert the_role.due == 0  # the primary holds 70 of 100
    replication.head, replication.behind = 120, 21
    handover.acknowledged()
    clock.advance(0)
    assert the_role.due == 0  # 99: still short of where the epoch began
    replication.behind = 20
    handover.acknowledged()
    assert the_role.due == 0  # once the role finished its transition
    clock.advance(0)
    assert the_role.due == 1 and handover.handed_back() and not handover.handed_back()
    handover.acknowledged()
    clock.advance(0)
    assert the_role.due == 1  # once


def test_failback_is_not_due_without_allow_failback_on_a_primary_or_alone():
    for ha, state in ((settings(allow_failback=False), role.ACTIVE_REPLICATED),
                      (settings(PRIMARY, allow_failback=True), role.ACTIVE_REPLICATED),
                      (settings(allow_failback=True), role.ACTIVE_ALONE)):
        clock, the_role, handover = hand_over(ha, Replication(head=100, lag=0))
        handover.serving(state, EPOCH)
        clock.advance(0)
        assert the_role.due == 0 and not handover.handed_back()


def test_no_failback_once_the_instance_no_longer_serves_replicated_in_the_epoch():
    clock, the_role, handover = hand_over(settings(allow_failback=True),
                                          Replication(head=100, lag=0))
    handover.serving(role.ACTIVE_REPLICATED, EPOCH)
    the_role.serving_in = EPOCH + 1
    clock.advance(0)
    assert the_role.due == 0 and not handover.handed_back()


def test_a_failback_the_role_refuses_is_not_one():
    clock, the_role, handover = hand_over(settings(allow_failback=True),
                                          Replication(head=100, lag=0))
    the_role.refuses = True
    handover.serving(role.ACTIVE_REPLICATED, EPOCH)
    clock.advance(0)
    assert not handover.handed_back()


def test_a_stopping_active_waits_for_its_hand_over():
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(head=100, lag=0))
    stopped = handover.at_stop(role.ACTIVE_REPLICATED)
    assert the_role.due == 1 and not stopped.called
    handover.stop_handed_over()
    assert stopped.called and clock.getDelayedCalls() == []


def test_a_stopping_active_waits_a_second_at_most():
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(head=100, lag=0))
    stopped = handover.at_stop(role.ACTIVE_REPLICATED)
    clock.advance(STOP_HAND_OVER_S - 0.01)
    assert not stopped.called
    clock.advance(0.01)
    assert stopped.called


def test_nothing_to_hand_over_at_a_stop():
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(head=100, lag=None))
    assert handover.at_stop(role.ACTIVE_ALONE).called
    the_role.refuses = True  # it lost its backup meanwhile
    assert handover.at_stop(role.ACTIVE_REPLICATED).called
    assert clock.getDelayedCalls() == []
    _, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=False),
                                      Replication(head=100, lag=0))
    assert handover.at_stop(role.ACTIVE_REPLICATED).called and the_role.due == 0
