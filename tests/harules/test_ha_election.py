"""
Tests for L{meshroute.harules.election}: the candidate's election, counting
answers on a L{task.Clock}.
"""

import pytest
from automat import NoTransition
from twisted.internet.task import Clock

from meshroute.harules.election import NO_MAJORITY, Defeat, start_election
from meshroute.harules.quorum import ACTIVE_ALIVE, STALE_EPOCH, Tally, Vote

VOTERS = frozenset({"p", "b", "w"})
TIMEOUT = 2.0


class Candidate:
    """
    An election on a clock that records how it ended.
    """

    def __init__(self, voters=VOTERS, epoch=2) -> None:
        self.clock = Clock()
        self.won: list[int] = []
        self.lost: list[Defeat] = []
        self.election = start_election(
            self.clock, Tally(voters, epoch), TIMEOUT, self.won.append, self.lost.append
        )

    def grant(self, voter, epoch=2):
        self.election.got_vote(Vote(voter, epoch, True, None, epoch))

    def refuse(self, voter, reason=STALE_EPOCH, granted_epoch=2):
        self.election.got_vote(Vote(voter, 2, False, reason, granted_epoch))


def test_a_majority_of_grants_wins_once():
    candidate = Candidate()
    candidate.grant("b")
    assert candidate.won == []
    candidate.grant("w")
    assert candidate.won == [2]
    candidate.grant("p")
    candidate.clock.advance(TIMEOUT * 2)
    assert (candidate.won, candidate.lost) == ([2], [])


def test_refusals_leaving_no_majority_lose_at_once():
    candidate = Candidate()
    candidate.grant("b")
    candidate.refuse("w", ACTIVE_ALIVE)
    assert candidate.lost == []
    candidate.refuse("p", STALE_EPOCH, granted_epoch=5)
    assert candidate.lost == [Defeat("refused", {"w": ACTIVE_ALIVE, "p": STALE_EPOCH}, 5)]
    candidate.grant("w")
    assert candidate.won == []


def test_silent_voters_lose_the_election_at_the_timeout():
    """
    A candidate cut off from the other voters (an isolated backup) hears
    only itself, and loses when the timeout passes.
    """
    candidate = Candidate()
    candidate.grant("b")
    candidate.clock.advance(TIMEOUT - 0.001)
    assert candidate.lost == []
    candidate.clock.advance(0.001)
    assert candidate.lost == [Defeat(NO_MAJORITY, {}, 2)]
    candidate.grant("w")
    assert candidate.won == []


def test_winning_cancels_the_timeout():
    candidate = Candidate()
    candidate.grant("b")
    candidate.grant("w")
    assert candidate.clock.getDelayedCalls() == []


def test_a_pair_without_witnesses_needs_both_votes():
    candidate = Candidate(voters=frozenset({"p", "b"}))
    candidate.grant("b")
    candidate.clock.advance(TIMEOUT)
    assert candidate.won == [] and candidate.lost[0].reason == NO_MAJORITY


def test_a_decision_cannot_be_fed_from_outside_after_the_end():
    candidate = Candidate()
    candidate.grant("b")
    candidate.grant("w")
    with pytest.raises(NoTransition):
        candidate.election.majority_refused()


def test_an_abandoned_election_reports_nothing():
    candidate = Candidate()
    candidate.grant("b")
    candidate.election.abandon()
    assert candidate.clock.getDelayedCalls() == []
    candidate.grant("w")
    candidate.clock.advance(TIMEOUT * 2)
    assert (candidate.won, candidate.lost) == ([], [])


def test_a_voter_that_granted_the_epoch_already_loses_it_at_once():
    """
    A voter that already granted this epoch (or a newer one) to another
    instance refuses stale-epoch: the candidate learns at once which
    epoch to ask above, rather than waiting out the timeout for a voter
    that is gone (the active that won that epoch and died).
    """
    candidate = Candidate()
    candidate.grant("b")
    candidate.refuse("w", STALE_EPOCH, granted_epoch=2)
    assert candidate.lost == [Defeat("refused", {"w": STALE_EPOCH}, 2)]
    candidate.clock.advance(TIMEOUT * 2)
    assert len(candidate.lost) == 1
