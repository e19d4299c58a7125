"""
When the answers of a session's sends leave: at once for a client that
waits for them, gathered for a moment for one that streams.

A send's answer (its C{Confirm}, a batch's C{Confirmed}) written at once
costs the router a write and the client a wake-up of its own, at the very
moment the router hands the message on and the next hop and the consumer
want a core (benchmarks/README.md, "Send answers gathered for a client
that streams").  A client that sends at its own pace, not waiting for the
answers, loses nothing when they come a little later and together; a
client that waits for each answer before its next send would lose the
whole hold on every send.  Which of the two a client is shows in what it
does while an answer is held: a streaming client sends again, a waiting
one cannot.  Only a send in the second half of a hold counts: a client
that keeps a few sends in flight sends the rest of them just after the
first is answered, or in the same read, and then waits.  As TCP tells an
interactive peer from a bulk one before delaying its acknowledgements,
L{AnswerPacing} holds an answer only to learn, and keeps holding only
while that holds:

    mode        what happens                               next mode
    ---------   ----------------------------------------   ---------------------
    prompt      an answer, not the probe one: written now  prompt
    prompt      every C{probe_every}-th answer: held       (a hold)
    gathering   an answer: held, with any held already     (a hold)
    (a hold)    a send arrives in its second half          (the hold streams)
    (a hold)    C{hold_s} after its first answer, the      gathering (and probed
                hold streamed: its answers written         soon, should it wait)
    (a hold)    ... it did not: written                    prompt, probing half
                                                           as often (down to one
                                                           in 4,096)
    (a hold)    another frame is written, or the turn's    unchanged
                deliveries: the held answers go first

So a waiting client pays one hold now and then, more and more rarely; a
streaming client's answers leave once per hold instead of once per send.
Holding only delays a write: the session has answered (and holds the
answer for a resume) when it is held, and a connection lost with answers
held is as one lost with them in flight.
"""

from twisted.internet.interfaces import IDelayedCall, IReactorTime

#: A waiting client is probed at first every this many answers...
FIRST_PROBE_EVERY = 64
#: ... and, each probe it waited through, half as often, to this.
RAREST_PROBE_EVERY = 4096

PROMPT = "prompt"
GATHERING = "gathering"


class AnswerPacing:
    """
    The pacing of one session's send answers on its connection.

    @ivar mode: L{PROMPT} or L{GATHERING}.
    @ivar probe_every: in L{PROMPT}, every how many answers one is held.
    """

    def __init__(self, clock: IReactorTime, write, hold_s: float) -> None:
        """
        @param write: writes a frame to the client now.
        @param hold_s: how long an answer may be held; 0 writes every
            answer at once.
        """
        self._clock = clock
        self._write = write
        self._hold_s = hold_s
        self.mode = PROMPT
        self.probe_every = FIRST_PROBE_EVERY
        self._until_probe = FIRST_PROBE_EVERY
        self._held: list = []
        self._call: IDelayedCall | None = None
        #: When a send arriving shows the client streams: the second
        #: half of the hold.
        self._streams_after = 0.0
        self._streamed = False

    def answer(self, frame) -> None:
        """
        Write a send's answer, now or with the hold.
        """
        if self._call is None:
            if self._hold_s <= 0 or not self._starts_hold():
                self._write(frame)
                return
            self._streamed = False
            self._streams_after = self._clock.seconds() + self._hold_s / 2
            self._call = self._clock.callLater(self._hold_s, self._hold_ended)
        self._held.append(frame)

    def _starts_hold(self) -> bool:
        if self.mode == GATHERING:
            return True
        self._until_probe -= 1
        if self._until_probe > 0:
            return False
        self._until_probe = self.probe_every
        return True

    def send_arrived(self) -> None:
        """
        The client sent again: if an answer has been held for half the
        hold, it did not wait for it.
        """
        if self._call is not None and self._clock.seconds() >= self._streams_after:
            self._streamed = True

    def release(self) -> None:
        """
        Another frame follows: write what is held first (the mode stays:
        the hold was cut short, not answered).
        """
        if self._call is not None:
            self._call.cancel()
            self._call = None
            self._write_held()

    def drop(self) -> None:
        """
        The connection is gone: what is held is as lost in transit.
        """
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self._held = []

    def _hold_ended(self) -> None:
        self._call = None
        self._write_held()
        if self._streamed:
            self.mode = GATHERING
            self.probe_every = FIRST_PROBE_EVERY
        else:
            self.mode = PROMPT
            self.probe_every = min(self.probe_every * 2, RAREST_PROBE_EVERY)
        self._until_probe = self.probe_every

    def _write_held(self) -> None:
        held, self._held = self._held, []
        for frame in held:
            self._write(frame)
