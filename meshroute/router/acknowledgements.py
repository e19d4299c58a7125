"""
When a link acknowledges the transfers it received: the receiving side
of a L{meshroute.router.peer_channel.PeerChannel}.

A transfer is acknowledged only once it is durable, cumulatively: one
L{Ack} at the end of the reactor turn covers every transfer made durable
in it.  With nothing to forward and fewer than C{every} unacknowledged,
the Ack waits up to C{delay_s} for more, so that a low rate costs one
frame (and one wake-up of the sender) for a few messages, not one each;
but only while waiting pays: a wait that brought no more transfers (the
sender was waiting for this very Ack, as a producer that sends one
message at a time and waits for its answer does, through its origin's
held accept, docs/routing.md) makes the next Acks go at the end of
their turn, and one in every L{PROBE_EVERY} of those waits again, to
find out whether the flow has changed.
What the transfers added to the backlog is forwarded only after their
Ack: the peer never sees our onward transfer of a message (which may come
back to it when routes change) before our acknowledgement of it.

Two states, each a class named for what it waits for; the channel holds
one, and L{Acknowledging.stop} gives the next:

    state          waits for
    -------------  ---------------------------------------------------------
    Acknowledging  transfers to become durable, and the moment to
                   acknowledge them (the end of their turn, or C{delay_s})
    Stopped        nothing: the link is closing, and acknowledges nothing
                   more; what still becomes durable moves on at once

    Acknowledging ─ durable ───▶ Acknowledging  (the Ack at the end of the turn)
    Acknowledging ─ send_due ──▶ Acknowledging  (the Ack for what is durable)
    Acknowledging ─ stop ──────▶ Stopped        (what waits to move moves)
    Stopped       ─ durable ───▶ Stopped        (no Ack: what they added moves)
    Stopped       ─ send_due, stop ▶ Stopped    (nothing)

Not states of the channel's Automat machine, and not an Automat machine
of its own: Automat runs an input that arrives while its machine is in a
transition only once that transition ends, and the engine asks every
link for its due acknowledgement
(L{IChannelEngine.acknowledge_due<meshroute.interfaces.IChannelEngine.acknowledge_due>})
from inside a transition of the sending machine of this very link, just
before it writes its transfers, which the Ack must precede; and these
inputs come with every frame received, where an Automat dispatch would
cost ten times the work it dispatches.
"""

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.wire.frames import Ack

#: Acknowledgements sent at once, after a wait that brought nothing more,
#: before one waits again to see whether it would now.
PROBE_EVERY = 32


class Acknowledging:
    """
    The link is open: what becomes durable is acknowledged at the end of
    its turn (or within C{delay_s}), then what it added to the backlog
    moves on.

    @ivar durable_seq: the highest sequence durable here.
    @ivar acked_seq: the highest sequence acknowledged.
    """

    def __init__(self, send: Callable[[object], None], flush: Callable[[], None],
                 clock: IReactorTime, forward: Callable[[str], None], every: int,
                 delay_s: float) -> None:
        """
        @param send: writes a frame on the link.
        @param flush: hands what was written on the link to the kernel now:
            an Ack sent at the end of its turn, or of its wait, is what the
            peer waits for.
        @param forward: called with each destination router whose backlog
            the durable transfers added to, once they are acknowledged
            (L{IChannelEngine.pump_towards
            <meshroute.interfaces.IChannelEngine.pump_towards>}).
        @param every: durable transfers acknowledged at the end of their
            turn even with nothing to forward.
        @param delay_s: the longest an acknowledgement waits for more.
        """
        self._send = send
        self._flush = flush
        self._clock = clock
        self._forward = forward
        self._every = every
        self._delay_s = delay_s
        self.durable_seq = 0
        self.acked_seq = 0
        # Transfers made durable since the last Ack (sequence numbers may
        # skip: docs/routing.md, "Forwarding while the origin's commit is
        # in flight").
        self._unacked = 0
        # The destinations to forward, until the Ack is sent.
        self._onward: set[str] = set()
        self._turn: IDelayedCall | None = None
        self._delay: IDelayedCall | None = None
        # Whether an Ack waits for more (it paid, last time), how many
        # were unacknowledged when the wait began, and how many went at
        # once since one last waited.
        self._waiting_pays = True
        self._unacked_at_wait = 0
        self._at_once = 0

    @property
    def due(self) -> bool:
        """
        Transfers are durable and not acknowledged yet (only then does an
        acknowledgement wait for its delay).
        """
        return self.durable_seq > self.acked_seq

    def durable(self, onward, seq: int, count: int = 1) -> None:
        """
        C{count} more transfers, up to C{seq}, are durable here; C{onward}:
        the destination routers whose backlog they added to.
        """
        if seq > self.durable_seq:
            self.durable_seq = seq
        self._unacked += count
        self._onward.update(onward)
        if self._turn is None:
            self._turn = self._clock.callLater(0, self._turn_ended)

    def send_due(self) -> None:
        """
        Acknowledge now what is durable and not acknowledged yet, if
        anything.
        """
        self._cancel_delay()
        if self.due:
            self.acked_seq = self.durable_seq
            self._unacked = 0
            self._send(Ack(self.durable_seq))

    def stop(self) -> "Stopped":
        """
        The link is closing: what waits to move moves; nothing more is
        acknowledged.
        """
        if self._turn is not None and self._turn.active():
            self._turn.cancel()
        self._turn = None
        self._cancel_delay()
        self._forward_onward()
        return Stopped(self._forward)

    def _turn_ended(self) -> None:
        """
        Acknowledge what became durable in the turn (or let it wait for
        more), then forward what it added to the backlog.
        """
        self._turn = None
        if self._onward or self._unacked >= self._every:
            self._acknowledge_at_once()
        elif self._delay is None and self.due:
            if self._waiting_pays or self._at_once >= PROBE_EVERY:
                self._at_once = 0
                self._unacked_at_wait = self._unacked
                self._delay = self._clock.callLater(self._delay_s, self._waited)
            else:
                self._at_once += 1
                self._acknowledge_at_once()
        self._forward_onward()

    def _waited(self) -> None:
        """
        The wait for more ended: acknowledge; whether the next Acks wait
        too depends on whether this one brought more.
        """
        self._delay = None
        self._waiting_pays = self._unacked > self._unacked_at_wait
        self._acknowledge_at_once()

    def _acknowledge_at_once(self) -> None:
        "Acknowledge what is due, and hand the Ack to the kernel now."
        if self.due:
            self.send_due()
            self._flush()

    def _forward_onward(self) -> None:
        onward, self._onward = self._onward, set()
        for router in onward:
            self._forward(router)

    def _cancel_delay(self) -> None:
        if self._delay is not None:
            if self._delay.active():
                self._delay.cancel()
            self._delay = None


class Stopped:
    """
    The link is closing: nothing more is acknowledged.  A transfer whose
    write was queued before still becomes durable, and moves on at once.
    """

    due = False

    def __init__(self, forward: Callable[[str], None]) -> None:
        self._forward = forward

    def durable(self, onward, seq: int, count: int = 1) -> None:
        for router in set(onward):
            self._forward(router)

    def send_due(self) -> None:
        pass

    def stop(self) -> "Stopped":
        return self
