"""
Tests for L{meshroute.ha.activation}: what an instance asks its voters
(recorded by a fake L{meshroute.ha.voters.Voters}) and what it makes of
their answers: the start-up decision (never an activation while the
pair is refused), epochs above every epoch it knows, a handed-over epoch
confirmed while in sync, the lease's loss, and a forced activation.
"""

from twisted.internet.task import Clock

from meshroute.ha.activation import Activation
from meshroute.ha.pairing import Pairing
from meshroute.harules import quorum
from meshroute.harules.election import Defeat
from meshroute.harules.lease import LEASE_EXPIRED
from meshroute.harules.quorum import LogPosition, StartAnswer, StartDecision, VoterRecord
from meshroute.harules.settings import PRIMARY, HASettings, ReplicationSettings

ROUTER = "router-b"
INSTANCE = "router-b/primary"
PEER = "router-b/backup"
WITNESS = "router-a"
HEARTBEAT_S = 0.5


class Lease:
    def __init__(self, lost) -> None:
        self.lost = lost
        self.released = False

    def release(self) -> None:
        self.released = True


class Voters:
    """
    Records what is asked of the voters; the test answers.
    """

    names = frozenset({INSTANCE, PEER, WITNESS})

    def __init__(self) -> None:
        self.abandoned = 0
        self.start_rounds: list = []
        self.elections: list[tuple[quorum.VoteRequest, object, object]] = []
        self.leases: list[tuple[Lease, int | None]] = []

    def abandon(self) -> None:
        self.abandoned += 1

    def ask_start(self, timeout, decided) -> None:
        assert timeout == 2 * HEARTBEAT_S
        self.start_rounds.append(decided)

    def elect(self, request, timeout, won, lost) -> None:
        assert timeout == 2 * HEARTBEAT_S
        self.elections.append((request, won, lost))

    def hold_lease(self, status, heartbeat_interval, lease_timeout, lost, forced_epoch=None):
        lease = Lease(lost)
        self.leases.append((lease, forced_epoch))
        return lease


class Instance:
    def __init__(self) -> None:
        self.clock = Clock()
        self.voters = Voters()
        self.pairing = Pairing(ROUTER, ROUTER)
        self.granted = 0
        self.position = LogPosition(3, 40)
        self.stopping = False
        self.activation = Activation(
            self.clock, HASettings(role=PRIMARY, group_name=ROUTER,
                                   replication=ReplicationSettings("a", "b", "(memory)", b"s"),
                                   heartbeat_interval_ms=500),
            INSTANCE, self.voters, self.pairing, lambda: self.granted, lambda: self.position,
            lambda: LogPosition(3, 39), lambda: self.stopping)
        self.outcomes: list = []


def answer(voter: str, active: str | None = None, granted_epoch: int = 0,
           position: LogPosition | None = None) -> StartAnswer:
    return StartAnswer(voter, active, VoterRecord(granted_epoch), position)


def test_the_start_up_rule_decides_and_the_epochs_answered_are_heard_of():
    instance = Instance()
    instance.activation.ask_start(instance.outcomes.append)
    assert instance.voters.abandoned == 1
    [decided] = instance.voters.start_rounds
    decided([answer(INSTANCE), answer(WITNESS, active=PEER, granted_epoch=6)])
    assert instance.outcomes == [StartDecision.FOLLOW]
    assert instance.activation.newest_epoch == 6


def test_a_refused_pair_only_waits():
    instance = Instance()
    instance.pairing.vet("router-typo")
    instance.activation.ask_start(instance.outcomes.append)
    instance.voters.start_rounds[0]([answer(INSTANCE), answer(WITNESS),
                                     answer(PEER, position=LogPosition(1, 1))])
    assert instance.outcomes == [StartDecision.WAIT]


def test_a_stopping_instance_asks_nothing_and_ignores_answers():
    instance = Instance()
    instance.activation.ask_start(instance.outcomes.append)
    instance.stopping = True
    instance.activation.ask_start(instance.outcomes.append)
    assert len(instance.voters.start_rounds) == 1 and instance.voters.abandoned == 2
    instance.voters.start_rounds[0]([answer(INSTANCE), answer(WITNESS, active=PEER)])
    assert instance.outcomes == []


def test_an_election_asks_above_every_epoch_known():
    instance = Instance()
    instance.activation.heard_of(5)
    instance.granted = 7
    instance.activation.elect(INSTANCE, False, 2, instance.outcomes.append,
                              lambda: instance.outcomes.append("lost"))
    request, won, lost = instance.voters.elections[0]
    assert request == quorum.VoteRequest(INSTANCE, INSTANCE, 8, LogPosition(3, 40), False)
    lost(Defeat("refused", {WITNESS: "stale-epoch"}, 11))
    assert instance.outcomes == ["lost"] and instance.activation.newest_epoch == 11
    instance.activation.elect(PEER, True, 2, instance.outcomes.append, lambda: None,
                              position=LogPosition(3, 38))
    request, won, _ = instance.voters.elections[1]
    # A hand-over names the peer's position, not this instance's (3, 40).
    assert request == quorum.VoteRequest(PEER, INSTANCE, 12, LogPosition(3, 38), True)
    won(12)
    assert instance.outcomes == ["lost", 12]


def test_a_handed_over_epoch_is_confirmed_while_in_sync_until_the_deadline():
    instance = Instance()
    in_sync = [True]
    handed = []
    instance.activation.confirm_hand_over(9, False, 2.0, lambda: in_sync[0],
                                          lambda *outcome: handed.append(outcome))
    request, won, lost = instance.voters.elections[0]
    assert request == quorum.VoteRequest(INSTANCE, INSTANCE, 9, LogPosition(3, 40), False)
    lost(Defeat("refused", {WITNESS: "active-alive"}, 9))
    instance.clock.advance(HEARTBEAT_S)  # asked again a heartbeat-interval later
    request, won, lost = instance.voters.elections[1]
    won(9)
    assert handed == [(9, False)]
    lost(Defeat("refused", {}, 9))
    instance.clock.advance(HEARTBEAT_S * 3)  # past the deadline: no more
    assert len(instance.voters.elections) == 2

    in_sync[0] = False
    instance.activation.confirm_hand_over(10, True, 10.0, lambda: in_sync[0], handed.append)
    assert len(instance.voters.elections) == 2


def test_a_lost_lease_expires_or_is_superseded_by_the_newest_epoch():
    instance = Instance()
    instance.activation.hold_lease(4, lambda: instance.outcomes.append("expired"),
                                   instance.outcomes.append)
    first, forced = instance.voters.leases[0]
    assert forced is None
    instance.activation.hold_lease(5, lambda: instance.outcomes.append("expired"),
                                   instance.outcomes.append)
    assert first.released
    second, _ = instance.voters.leases[1]
    second.lost(LEASE_EXPIRED)
    instance.activation.heard_of(8)
    second.lost("superseded")
    assert instance.outcomes == ["expired", 8]
    instance.activation.release_lease()
    assert not second.released  # lost already: nothing to release


def test_a_forced_activation_serves_above_every_epoch_known_and_its_lease_says_so():
    instance = Instance()
    instance.activation.heard_of(2)
    assert instance.activation.force("operator") == 4  # above its data's epoch 3
    assert instance.activation.newest_epoch == 4
    instance.activation.hold_lease(4, lambda: None, lambda epoch: None)
    assert instance.voters.leases[0][1] == 4
