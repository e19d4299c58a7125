"""
Tests for L{meshroute.harules.lease}: the lease rule on its own, and the
active's lease machine on a L{task.Clock} against real L{Voter}s.
"""

from twisted.internet.task import Clock

from meshroute.harules.lease import LEASE_EXPIRED, SUPERSEDED, LeaseCore, hold_lease, lease_expiry
from meshroute.harules.quorum import (
    Heartbeat,
    HeartbeatAnswer,
    LogPosition,
    Voter,
    VoteRequest,
    VoterRecord,
)

INTERVAL = 0.5
LEASE = 3.0
VOTERS = frozenset({"p", "b", "w"})
POSITION = LogPosition(1, 0)


# -- the rule -----------------------------------------------------------------


def test_the_lease_counts_the_active_itself():
    assert lease_expiry({"w": 10.0}, VOTERS, "p", LEASE) == 13.0


def test_the_lease_runs_from_the_newest_majority():
    five = frozenset({"p", "b", "w1", "w2", "w3"})
    # A majority of 5 is 3: p and the two newest answers.
    answered = {"b": 1.0, "w1": 7.0, "w2": 4.0, "w3": 2.0}
    assert lease_expiry(answered, five, "p", LEASE) == 4.0 + LEASE


def test_no_lease_without_a_majority():
    assert lease_expiry({}, VOTERS, "p", LEASE) is None
    assert lease_expiry({"w": 1.0}, frozenset({"p", "b", "w", "x"}), "p", LEASE) is None


def test_strangers_and_the_active_itself_are_not_answers():
    assert lease_expiry({"p": 9.0, "x": 9.0}, VOTERS, "p", LEASE) is None


# -- the machine, against voters ------------------------------------------------


def frozen(active: "Active", seconds: float) -> None:
    """
    The process was stopped (SIGSTOP) for C{seconds}: time passed, and no
    timer has run yet.
    """
    active.clock.rightNow += seconds


class Active:
    """
    p, active in epoch 1 with voters b and w on one clock; heartbeats
    reach the voters in C{reachable} and are answered at once.
    """

    def __init__(self) -> None:
        self.clock = Clock()
        self.reachable = {"b", "w"}
        self.voters = {
            name: Voter(name, LEASE, VoterRecord(1, "p", POSITION, POSITION), 0.0)
            for name in ("b", "w")
        }
        self.rounds: list[float] = []
        self.lost: list[str] = []
        core = LeaseCore(self.clock, "p", VOTERS, INTERVAL, LEASE, self.send, self.lost.append)
        self.core = core
        self.lease = hold_lease(core, requested_at=0.0, granted_by=["p", "b", "w"])

    def send(self, sent_at: float) -> None:
        self.rounds.append(sent_at)
        for name in sorted(self.reachable):
            beat = Heartbeat("p", 1, POSITION, POSITION, sent_at)
            self.lease.got_answer(self.voters[name].heartbeat(beat, self.clock.seconds()))


def test_heartbeats_go_out_every_interval():
    active = Active()
    active.clock.pump([INTERVAL] * 4)
    assert active.rounds == [0.5, 1.0, 1.5, 2.0]


def test_the_lease_holds_while_a_majority_answers():
    active = Active()
    active.reachable = {"w"}
    active.clock.pump([INTERVAL] * 100)
    assert active.lost == []


def test_the_lease_is_lost_a_lease_timeout_after_the_last_majority_round():
    """
    Cut off from both voters at 1.2 s: the last heartbeat they accepted
    was sent at 1.0 s, so the lease ends at 4.0 s, not later.
    """
    active = Active()
    active.clock.pump([0.5, 0.5, 0.2])
    active.reachable = set()
    active.clock.advance(4.0 - 1.2 - 0.01)
    assert active.lost == []
    active.clock.advance(0.02)
    assert active.lost == [LEASE_EXPIRED]
    assert active.clock.getDelayedCalls() == []


def test_a_late_answer_counts_from_when_its_heartbeat_was_sent():
    active = Active()
    active.reachable = set()
    active.clock.advance(2.9)
    # An answer to the heartbeat sent at 0.5 s arrives very late.
    active.lease.got_answer(HeartbeatAnswer("w", True, 0.5, 1))
    active.clock.advance(0.6 - 0.01)
    assert active.lost == []
    active.clock.advance(0.02)
    assert active.lost == [LEASE_EXPIRED]


def test_the_lease_expires_before_any_voter_grants_the_next_epoch():
    """
    The safety of the lease: the voters that saw p's last accepted
    heartbeat refuse b until a lease-timeout after it, and by then p has
    fenced itself.
    """
    active = Active()
    active.clock.advance(1.7)
    active.reachable = set()
    request = VoteRequest("b", "b", 2, POSITION, True)
    lost_at = None
    while active.clock.seconds() < 10:
        active.clock.advance(0.01)
        if active.lost and lost_at is None:
            lost_at = active.clock.seconds()
        if active.voters["w"].request(request, active.clock.seconds()).granted:
            break
    assert lost_at is not None and lost_at <= active.clock.seconds()


def test_a_refused_heartbeat_supersedes_the_lease_at_once():
    active = Active()
    active.voters["w"].record = VoterRecord(2, "b", POSITION, LogPosition(2, 0))
    active.clock.advance(INTERVAL)
    assert active.lost == [SUPERSEDED]
    assert active.clock.getDelayedCalls() == []


def test_a_released_lease_stops_its_timers_and_reports_nothing():
    active = Active()
    active.lease.release()
    active.lease.got_answer(HeartbeatAnswer("w", True, 0.0, 1))
    active.clock.advance(10 * LEASE)
    assert active.lost == [] and active.rounds == []


def test_after_a_freeze_the_lease_is_gone_before_its_timer_runs():
    """
    Woken from SIGSTOP, the zombie may be handed a send before its
    overdue expiry timer runs: asking the lease itself says no.
    """
    active = Active()
    active.clock.advance(1.0)
    assert active.core.holds()
    active.reachable = set()
    frozen(active, LEASE)
    assert active.lost == [] and not active.core.holds()
    active.clock.advance(0)
    assert active.lost == [LEASE_EXPIRED]
