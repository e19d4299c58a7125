"""
The active instance's lease, as a rule (L{lease_expiry}) and an Automat
machine driven by an injected clock.

    holding ── lease expired ──▶ fenced
       │   └── superseded ─────▶ fenced
       └────── released ───────▶ released

The active sends a L{Heartbeat} to every voter each
C{heartbeat-interval}, stamped with its own clock (C{sent_at}); a voter
that accepts it echoes the stamp back.  Its own voter gets each one too
(C{send_heartbeats}' duty): only then does that voter refuse the peer
while the active serves, which the safety argument needs when the
majority that elects the peer shares no voter but the active with the
one that renews the lease.  The lease is held while a
majority of the voters, the active itself counted, accepted a heartbeat
sent less than C{lease-timeout} ago.  Measuring from when the heartbeat
was I{sent}, not from when its answer arrived, is what makes the lease
safe: a voter grants a new epoch only after it has heard nothing from
the active for C{lease-timeout}, so by the time any majority grants the
next epoch, the old active's lease has run out by its own reckoning
(docs/ha.md, "The lease").  The election that made the instance active
counts as the first round: each grant is an answer to a request sent
when the election began.

A voter that refuses a heartbeat because it knows a newer epoch fences
the active at once: someone else holds (or is taking) its place.  When
the lease runs out or is superseded, C{lost(reason)} is called once; the
role (L{meshroute.harules.role}) then stops serving.  Between the two, the
active checks L{LeaseCore.holds} before each confirmation, since a
timer can be late.  C{released} ends a
lease the active gives up by itself (it hands over, or stops).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Callable, Protocol

from automat import TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.harules.quorum import HeartbeatAnswer, majority

#: Why a lease was lost.
LEASE_EXPIRED = "lease-expired"
SUPERSEDED = "superseded"


def lease_expiry(
    answered_at: Mapping[str, float],
    voters: frozenset[str],
    instance: str,
    lease_timeout: float,
) -> float | None:
    """
    Until when C{instance} holds its lease, or C{None} if it holds none.

    @param answered_at: for each other voter, the send time of the newest
        heartbeat (or vote request) it accepted.
    @param voters: the group's voters, C{instance} among them; a group
        has at least two (the pair).
    @return: the moment the lease runs out: C{lease_timeout} after the
        send time of the heartbeat that, with the newer ones and the
        active's own voice, still makes a majority.
    """
    needed = majority(len(voters)) - 1
    times = sorted(
        (at for voter, at in answered_at.items() if voter in voters and voter != instance),
        reverse=True,
    )
    if len(times) < needed:
        return None
    return times[needed - 1] + lease_timeout


class LeaseInputs(Protocol):
    """
    Everything that can happen to the active's lease.
    """

    def heartbeat_due(self) -> None:
        "A heartbeat-interval passed: time to send the next round."

    def got_answer(self, answer: HeartbeatAnswer) -> None:
        "A voter answered a heartbeat."

    def superseded(self, epoch: int) -> None:
        "A voter refused a heartbeat: it knows the newer epoch C{epoch}."

    def lease_expired(self) -> None:
        "No majority accepted a heartbeat sent within lease-timeout."

    def release(self) -> None:
        "The active gives up its lease (hand-over, shutdown)."


@dataclass
class LeaseCore:
    """
    The lease's data, its timers, and its ways out.

    @ivar send_heartbeats: sends one round of heartbeats stamped with the
        given time to every voter, this instance's own included (its
        answer is not needed for the lease, which counts the active
        anyway).
    @ivar lost: called once with L{LEASE_EXPIRED} or L{SUPERSEDED}.
    """

    clock: IReactorTime
    instance: str
    voters: frozenset[str]
    heartbeat_interval: float
    lease_timeout: float
    send_heartbeats: Callable[[float], None]
    lost: Callable[[str], None]
    answered_at: dict[str, float] = field(default_factory=dict)
    _tick: IDelayedCall | None = field(default=None, init=False)
    _expiry: IDelayedCall | None = field(default=None, init=False)

    def begin(self, inputs: LeaseInputs, requested_at: float, granted_by: Iterable[str]) -> None:
        """
        Start the lease from the election that won it (the first round);
        the next round goes out one interval from now.
        """
        for voter in granted_by:
            self.answered_at[voter] = requested_at
        self.reschedule(inputs)
        self._tick = self.clock.callLater(self.heartbeat_interval, inputs.heartbeat_due)

    def beat(self, inputs: LeaseInputs) -> None:
        """
        Send a round of heartbeats and arm the next one.
        """
        self._tick = self.clock.callLater(self.heartbeat_interval, inputs.heartbeat_due)
        self.send_heartbeats(self.clock.seconds())

    def holds(self) -> bool:
        """
        Whether the lease is held at this moment, by the clock.

        The active asks this before it confirms anything: after a freeze
        (SIGSTOP) the expiry timer is overdue, and the reactor may hand
        it a client's send before it runs the timer.
        """
        until = lease_expiry(self.answered_at, self.voters, self.instance, self.lease_timeout)
        return until is not None and self.clock.seconds() < until

    def answer(self, inputs: LeaseInputs, answer: HeartbeatAnswer) -> None:
        if not answer.accepted:
            inputs.superseded(answer.granted_epoch)
            return
        newest = max(answer.sent_at, self.answered_at.get(answer.voter, answer.sent_at))
        self.answered_at[answer.voter] = newest
        self.reschedule(inputs)

    def reschedule(self, inputs: LeaseInputs) -> None:
        """
        Arm the expiry timer for the lease's current end.
        """
        if self._expiry is not None and self._expiry.active():
            self._expiry.cancel()
        until = lease_expiry(self.answered_at, self.voters, self.instance, self.lease_timeout)
        delay = 0.0 if until is None else max(0.0, until - self.clock.seconds())
        self._expiry = self.clock.callLater(delay, inputs.lease_expired)

    def end(self) -> None:
        """
        Stop both timers.
        """
        for call in (self._tick, self._expiry):
            if call is not None and call.active():
                call.cancel()
        self._tick = self._expiry = None


def _build_lease_machine():
    builder = TypeMachineBuilder(LeaseInputs, LeaseCore)
    holding = builder.state("holding")
    fenced = builder.state("fenced")
    released = builder.state("released")

    @holding.upon(LeaseInputs.heartbeat_due).loop()
    def beat(inputs: LeaseInputs, core: LeaseCore) -> None:
        core.beat(inputs)

    @holding.upon(LeaseInputs.got_answer).loop()
    def answered(inputs: LeaseInputs, core: LeaseCore, answer: HeartbeatAnswer) -> None:
        core.answer(inputs, answer)

    @holding.upon(LeaseInputs.lease_expired).to(fenced)
    def expired(inputs: LeaseInputs, core: LeaseCore) -> None:
        core.end()
        core.lost(LEASE_EXPIRED)

    @holding.upon(LeaseInputs.superseded).to(fenced)
    def superseded(inputs: LeaseInputs, core: LeaseCore, epoch: int) -> None:
        core.end()
        core.lost(SUPERSEDED)

    @holding.upon(LeaseInputs.release).to(released)
    def release(inputs: LeaseInputs, core: LeaseCore) -> None:
        core.end()

    # Answers to heartbeats sent before the end change nothing.
    for ended in (fenced, released):
        ended.upon(LeaseInputs.got_answer).loop().returns(None)
        ended.upon(LeaseInputs.release).loop().returns(None)
    return builder.build()


_LEASE_MACHINE = _build_lease_machine()


def hold_lease(core: LeaseCore, requested_at: float, granted_by: Iterable[str]) -> LeaseInputs:
    """
    Start holding the lease won by an election whose vote requests were
    sent at C{requested_at} and granted by C{granted_by}.
    """
    inputs = _LEASE_MACHINE(core)
    core.begin(inputs, requested_at, granted_by)
    return inputs
