"""
The candidate's side of an epoch election, as an Automat machine.

    awaiting_votes ── majority granted ──▶ won
          │
          ├──── majority refused ───────▶ lost
          ├──── election timeout ───────▶ lost
          └──── abandoned ──────────────▶ abandoned

The candidate has sent its L{VoteRequest} to every voter (itself
included: it is a voter too); each answer is fed in as C{got_vote}.  A
L{Tally} decides: a majority of grants wins, refusals that leave no
majority possible lose at once, and voters that stay silent for the
election timeout lose it too (a candidate cut off from the voters never
wins by waiting).  The outcome is reported once; answers that arrive
after it are ignored.  An election its candidate gives up (it started
another, or stops) reports nothing.

A lost election reports the newest epoch any voter had granted, so the
next attempt (the role's business, not this machine's) asks above it.
"""

from dataclasses import dataclass, field
from typing import Callable, Protocol

from automat import TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.harules.quorum import Outcome, Tally, Vote

#: Why an election was lost, besides the voters' own refusal reasons.
NO_MAJORITY = "no-majority"


@dataclass(frozen=True)
class Defeat:
    """
    Why an election was lost.

    @ivar reason: L{NO_MAJORITY} when voters stayed silent, otherwise
        C{"refused"}.
    @ivar refusals: voter → refusal reason, for the event log.
    @ivar newest_epoch: the newest epoch any voter had granted.
    """

    reason: str
    refusals: dict[str, str]
    newest_epoch: int


class ElectionInputs(Protocol):
    """
    Everything that can happen to an election.
    """

    def got_vote(self, vote: Vote) -> None:
        "A voter answered the vote request."

    def majority_granted(self) -> None:
        "The votes counted so far are a majority of grants."

    def majority_refused(self) -> None:
        "The refusals counted so far leave no majority possible."

    def election_timed_out(self) -> None:
        "The election timeout passed without a decision."

    def abandon(self) -> None:
        "The candidate no longer wants this election's outcome."


@dataclass
class ElectionCore:
    """
    The election's data and its way out: C{won(epoch)} or C{lost(defeat)}.
    """

    clock: IReactorTime
    tally: Tally
    timeout: float
    won: Callable[[int], None]
    lost: Callable[[Defeat], None]
    _timer: IDelayedCall | None = field(default=None, init=False)

    def start(self, inputs: ElectionInputs) -> None:
        """
        Arm the election timeout; call once, right after the vote
        requests went out.
        """
        self._timer = self.clock.callLater(self.timeout, inputs.election_timed_out)

    def count(self, inputs: ElectionInputs, vote: Vote) -> None:
        outcome = self.tally.record(vote)
        if outcome is Outcome.WON:
            inputs.majority_granted()
        elif outcome is Outcome.LOST:
            inputs.majority_refused()

    def finish(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def defeat(self, reason: str) -> Defeat:
        return Defeat(reason, self.tally.refusals(), self.tally.newest_epoch())


def _build_election_machine():
    builder = TypeMachineBuilder(ElectionInputs, ElectionCore)
    awaiting_votes = builder.state("awaiting_votes")
    won = builder.state("won")
    lost = builder.state("lost")
    abandoned = builder.state("abandoned")

    @awaiting_votes.upon(ElectionInputs.got_vote).loop()
    def count(inputs: ElectionInputs, core: ElectionCore, vote: Vote) -> None:
        core.count(inputs, vote)

    @awaiting_votes.upon(ElectionInputs.majority_granted).to(won)
    def win(inputs: ElectionInputs, core: ElectionCore) -> None:
        core.finish()
        core.won(core.tally.epoch)

    @awaiting_votes.upon(ElectionInputs.majority_refused).to(lost)
    def refused(inputs: ElectionInputs, core: ElectionCore) -> None:
        core.finish()
        core.lost(core.defeat("refused"))

    @awaiting_votes.upon(ElectionInputs.election_timed_out).to(lost)
    def timed_out(inputs: ElectionInputs, core: ElectionCore) -> None:
        core.finish()
        core.lost(core.defeat(NO_MAJORITY))

    @awaiting_votes.upon(ElectionInputs.abandon).to(abandoned)
    def abandon(inputs: ElectionInputs, core: ElectionCore) -> None:
        core.finish()

    # Decided: late answers change nothing.
    for decided in (won, lost, abandoned):
        decided.upon(ElectionInputs.got_vote).loop().returns(None)
        decided.upon(ElectionInputs.abandon).loop().returns(None)
    return builder.build()


_ELECTION_MACHINE = _build_election_machine()


def start_election(
    clock: IReactorTime,
    tally: Tally,
    timeout: float,
    won: Callable[[int], None],
    lost: Callable[[Defeat], None],
) -> ElectionInputs:
    """
    Start counting votes for C{tally.epoch}; feed each answer to the
    returned machine's C{got_vote}.
    """
    core = ElectionCore(clock, tally, timeout, won, lost)
    inputs = _ELECTION_MACHINE(core)
    core.start(inputs)
    return inputs
