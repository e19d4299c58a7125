"""
When a link acknowledges the transfers it received: the receiving side
of a L{meshroute.peer_channel.PeerChannel}, as a small Automat machine.

A transfer is acknowledged only once it is durable, cumulatively: one
L{Ack} at the end of the reactor turn covers every transfer made durable
in it.  With nothing to forward and fewer than C{every} unacknowledged,
the Ack waits up to C{delay_s} for more, so that a low rate costs one
frame (and one wake-up of the sender) for a few messages, not one each.
What the transfers added to the backlog is forwarded only after their
Ack: the peer never sees our onward transfer of a message (which may come
back to it when routes change) before our acknowledgement of it.

    state          waits for
    -------------  ---------------------------------------------------------
    acknowledging  transfers to become durable, and the moment to
                   acknowledge them (the end of their turn, or C{delay_s})
    stopped        nothing: the link is closing, and acknowledges nothing
                   more

    acknowledging ─ durable ─────▶ acknowledging  (the Ack at the end of the turn)
    acknowledging ─ turn_ended ──▶ acknowledging  (the Ack now or within delay_s;
                                                   then what they added moves)
    acknowledging ─ ack_due ─────▶ acknowledging  (the Ack for what is durable)
    acknowledging ─ stop ────────▶ stopped        (what waits to move moves)
    stopped       ─ durable ─────▶ stopped        (no Ack: what they added moves)
    stopped       ─ ack_due, stop ▶ stopped       (nothing)

It is a machine of its own, not states of the channel's sending machine,
because Automat runs an input that arrives while its machine is in a
transition only once that transition ends: the engine asks every link
for its due acknowledgement
(L{IChannelEngine.acknowledge_due<meshroute.interfaces.IChannelEngine.acknowledge_due>})
from inside a transition of the sending machine of this very link, just
before it writes its transfers, and the Ack must go first.
"""

from dataclasses import dataclass, field
from typing import Callable, Protocol

from automat import TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.wire.frames import Ack


class AckInputs(Protocol):
    """
    Everything that can happen to the acknowledging side of a link.
    """

    def durable(self, onward, seq: int) -> None:
        """
        The transfers up to C{seq} are durable here; C{onward}: the
        destination routers whose backlog they added to.
        """

    def turn_ended(self) -> None:
        "The reactor turn in which transfers became durable is over."

    def ack_due(self) -> None:
        "Acknowledge now what is durable: transfers are about to go, or the delay passed."

    def stop(self) -> None:
        "The link is closing."


@dataclass
class AckCore:
    """
    What the link made durable and acknowledged, and when it
    acknowledges next.

    @ivar send: writes a frame on the link.
    @ivar forward: called with each destination router whose backlog the
        durable transfers added to, once they are acknowledged
        (L{IChannelEngine.pump_towards<meshroute.interfaces.IChannelEngine.pump_towards>}).
    @ivar every: durable transfers acknowledged at the end of their turn
        even with nothing to forward.
    @ivar delay_s: the longest an acknowledgement waits for more.
    @ivar onward: the destinations to forward, until the Ack is sent.
    """

    send: Callable[[object], None]
    clock: IReactorTime
    forward: Callable[[str], None]
    every: int
    delay_s: float
    durable_seq: int = 0
    acked_seq: int = 0
    onward: set[str] = field(default_factory=set)
    _turn: IDelayedCall | None = field(default=None, init=False)
    _delay: IDelayedCall | None = field(default=None, init=False)

    @property
    def due(self) -> bool:
        """
        Transfers are durable and not acknowledged yet (only then does an
        acknowledgement wait for its delay).
        """
        return self.durable_seq > self.acked_seq

    def record(self, onward, seq: int) -> None:
        if seq > self.durable_seq:
            self.durable_seq = seq
        self.onward.update(onward)

    def at_end_of_turn(self, inputs: AckInputs) -> None:
        if self._turn is None:
            self._turn = self.clock.callLater(0, inputs.turn_ended)

    def turn_ended(self, inputs: AckInputs) -> None:
        """
        Acknowledge what became durable in the turn (or let it wait for
        more), then forward what it added to the backlog.
        """
        self._turn = None
        if self.onward or self.durable_seq - self.acked_seq >= self.every:
            self.send_ack()
        elif self._delay is None and self.due:
            self._delay = self.clock.callLater(self.delay_s, inputs.ack_due)
        self.forward_onward()

    def send_ack(self) -> None:
        """
        Acknowledge what is durable and not acknowledged yet, if anything.
        """
        self._cancel_delay()
        if self.due:
            self.acked_seq = self.durable_seq
            self.send(Ack(self.durable_seq))

    def forward_onward(self) -> None:
        onward, self.onward = self.onward, set()
        for router in onward:
            self.forward(router)

    def stop(self) -> None:
        if self._turn is not None and self._turn.active():
            self._turn.cancel()
        self._turn = None
        self._cancel_delay()
        self.forward_onward()

    def _cancel_delay(self) -> None:
        if self._delay is not None:
            if self._delay.active():
                self._delay.cancel()
            self._delay = None


def _build_ack_machine():
    builder = TypeMachineBuilder(AckInputs, AckCore)
    acknowledging = builder.state("acknowledging")
    stopped = builder.state("stopped")

    @acknowledging.upon(AckInputs.durable).loop()
    def durable(inputs: AckInputs, core: AckCore, onward, seq: int) -> None:
        core.record(onward, seq)
        core.at_end_of_turn(inputs)

    @acknowledging.upon(AckInputs.turn_ended).loop()
    def turn_ended(inputs: AckInputs, core: AckCore) -> None:
        core.turn_ended(inputs)

    @acknowledging.upon(AckInputs.ack_due).loop()
    def ack_due(inputs: AckInputs, core: AckCore) -> None:
        core.send_ack()

    @acknowledging.upon(AckInputs.stop).to(stopped)
    def stop(inputs: AckInputs, core: AckCore) -> None:
        core.stop()

    @stopped.upon(AckInputs.durable).loop()
    def durable_after_close(inputs: AckInputs, core: AckCore, onward, seq: int) -> None:
        # Its write was queued before the link closed: no acknowledgement
        # any more, but it moves on all the same.
        core.record(onward, seq)
        core.forward_onward()

    stopped.upon(AckInputs.ack_due).loop().returns(None)
    stopped.upon(AckInputs.stop).loop().returns(None)
    return builder.build()


#: The machine's factory: C{ACKNOWLEDGING(core)} returns its L{AckInputs}.
ACKNOWLEDGING = _build_ack_machine()
