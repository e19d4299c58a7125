"""
Tests for L{meshroute.ha.handover}: a backup with C{allow-failback} hands
the router back, and a stopping active with C{failover-on-shutdown} hands
over (waiting a second at most), only once the peer holds the replicated
epoch's start record and its voter can be asked; the hand-over names the
peer's position.
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
    What the active knows of its peer: its position once it acknowledged
    the epoch's start record (None before).
    """

    def __init__(self, peer: LogPosition | None) -> None:
        self.peer = peer

    def peer_position(self) -> LogPosition | None:
        return self.peer


class Role:
    """
    The role's C{handover_due} (noting the position the hand-over
    names), whether the instance still serves replicated in an epoch, and
    whether the peer's voter can be asked.
    """

    def __init__(self) -> None:
        self.due = 0
        self.refuses = False
        self.serving_in = EPOCH
        self.reachable = True
        self.handover: HandOver | None = None
        self.named: list[LogPosition | None] = []

    def handover_due(self) -> None:
        if self.refuses:
            raise NoTransition(role.ACTIVE_ALONE, "handover_due")
        self.due += 1
        self.named.append(self.handover.peer_position)

    def serves_replicated_in(self, epoch: int) -> bool:
        return epoch == self.serving_in


def settings(ha_role: str = BACKUP, **options) -> HASettings:
    return HASettings(role=ha_role, group_name="router-b",
                      replication=ReplicationSettings("tcp:7201", "tcp:7202", "(memory)", b"s"),
                      **options)


def hand_over(ha: HASettings, replication: Replication) -> tuple[Clock, Role, HandOver]:
    clock = Clock()
    the_role = Role()
    the_role.handover = HandOver(clock, ha, "router-b/backup", replication,
                                 lambda: the_role.reachable, the_role.handover_due,
                                 the_role.serves_replicated_in)
    return clock, the_role, the_role.handover


def test_failback_waits_until_the_primary_holds_the_epoch_s_start_record():
    replication = Replication(peer=None)
    clock, the_role, handover = hand_over(settings(allow_failback=True), replication)
    handover.serving(role.ACTIVE_REPLICATED, EPOCH)
    clock.advance(0)
    assert the_role.due == 0  # it has not acknowledged the start record yet
    replication.peer = LogPosition(EPOCH, 120)
    assert the_role.due == 0  # once told, and once the role finished its transition
    handover.acknowledged()
    assert the_role.due == 0
    clock.advance(0)
    assert the_role.due == 1 and handover.handed_back() and not handover.handed_back()
    assert the_role.named == [LogPosition(EPOCH, 120)]
    handover.acknowledged()
    clock.advance(0)
    assert the_role.due == 1  # once


def test_failback_waits_until_the_primary_s_voter_can_be_asked():
    clock, the_role, handover = hand_over(settings(allow_failback=True),
                                          Replication(LogPosition(EPOCH, 100)))
    the_role.reachable = False
    handover.serving(role.ACTIVE_REPLICATED, EPOCH)
    handover.acknowledged()
    clock.advance(0)
    assert the_role.due == 0
    the_role.reachable = True
    handover.acknowledged()
    clock.advance(0)
    assert the_role.due == 1 and the_role.named == [LogPosition(EPOCH, 100)]


def test_failback_is_not_due_without_allow_failback_on_a_primary_or_alone():
    for ha, state in ((settings(allow_failback=False), role.ACTIVE_REPLICATED),
                      (settings(PRIMARY, allow_failback=True), role.ACTIVE_REPLICATED),
                      (settings(allow_failback=True), role.ACTIVE_ALONE)):
        clock, the_role, handover = hand_over(ha, Replication(LogPosition(EPOCH, 100)))
        handover.serving(state, EPOCH)
        clock.advance(0)
        assert the_role.due == 0 and not handover.handed_back()


def test_no_failback_once_the_instance_no_longer_serves_replicated_in_the_epoch():
    clock, the_role, handover = hand_over(settings(allow_failback=True),
                                          Replication(LogPosition(EPOCH, 100)))
    handover.serving(role.ACTIVE_REPLICATED, EPOCH)
    the_role.serving_in = EPOCH + 1
    clock.advance(0)
    assert the_role.due == 0 and not handover.handed_back()


def test_a_failback_the_role_refuses_is_not_one():
    clock, the_role, handover = hand_over(settings(allow_failback=True),
                                          Replication(LogPosition(EPOCH, 100)))
    the_role.refuses = True
    handover.serving(role.ACTIVE_REPLICATED, EPOCH)
    clock.advance(0)
    assert not handover.handed_back()


def test_a_stopping_active_waits_for_its_hand_over():
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(LogPosition(EPOCH, 100)))
    stopped = handover.at_stop(role.ACTIVE_REPLICATED)
    assert the_role.due == 1 and not stopped.called
    assert the_role.named == [LogPosition(EPOCH, 100)]
    handover.stop_handed_over()
    assert stopped.called and clock.getDelayedCalls() == []


def test_a_stopping_active_waits_a_second_at_most():
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(LogPosition(EPOCH, 100)))
    stopped = handover.at_stop(role.ACTIVE_REPLICATED)
    clock.advance(STOP_HAND_OVER_S - 0.01)
    assert not stopped.called
    clock.advance(0.01)
    assert stopped.called


def test_a_stopping_active_hands_over_once_its_backup_is_ready_within_the_second():
    """
    The backup has not acknowledged the epoch's start record yet, or its
    voter cannot be asked: the stopping active hands over once it is
    ready, or, not ready within the second, stops without handing over.
    """
    for unready in ("start record", "voter"):
        replication = Replication(None if unready == "start record" else LogPosition(EPOCH, 9))
        clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                              replication)
        the_role.reachable = unready != "voter"
        stopped = handover.at_stop(role.ACTIVE_REPLICATED)
        clock.advance(0.5)
        handover.acknowledged()
        clock.advance(0)
        assert the_role.due == 0
        replication.peer, the_role.reachable = LogPosition(EPOCH, 10), True
        handover.acknowledged()
        clock.advance(0)
        assert the_role.due == 1 and the_role.named == [LogPosition(EPOCH, 10)]
        assert not stopped.called
        handover.stop_handed_over()
        assert stopped.called and clock.getDelayedCalls() == []
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(None))
    stopped = handover.at_stop(role.ACTIVE_REPLICATED)
    clock.advance(STOP_HAND_OVER_S)
    assert stopped.called and the_role.due == 0
    handover.acknowledged()
    clock.advance(0)
    assert the_role.due == 0  # no hand-over after the stop


def test_nothing_to_hand_over_at_a_stop():
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(None))
    assert handover.at_stop(role.ACTIVE_ALONE).called
    clock, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=True),
                                          Replication(LogPosition(EPOCH, 100)))
    the_role.refuses = True  # it lost its backup meanwhile
    assert handover.at_stop(role.ACTIVE_REPLICATED).called
    assert clock.getDelayedCalls() == []
    _, the_role, handover = hand_over(settings(PRIMARY, failover_on_shutdown=False),
                                      Replication(LogPosition(EPOCH, 100)))
    assert handover.at_stop(role.ACTIVE_REPLICATED).called and the_role.due == 0
