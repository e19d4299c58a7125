"""
STOMP's heart-beats (STOMP 1.2, "Heart-beating") on the router's side of
one connection (docs/stomp.md, "Connections and heart-beats"): negotiated
from the client's C{heart-beat} header and the router's offer
(C{[stomp.listener] heart-beat}); the router's sent on their own timer,
whether or not it wrote anything; the client's expected within the
connection's TTL, which they make (L{TTL_PER_HEARTBEAT} times the
negotiated interval, as Artemis' C{heartBeatToConnectionTtlModifier}; no
heart-beats from the client, no TTL).
"""

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

from meshroute.stomp.frames import parse_heart_beat

#: How a client's heart-beat interval becomes its TTL.
TTL_PER_HEARTBEAT = 2


@dataclass(eq=False)
class HeartBeats:
    """
    The heart-beats of one STOMP connection.

    @ivar sends: how often the router sends one (ms; 0: never).
    @ivar expects: how often the router expects one from the client (ms;
        0: never).
    """

    sends: int = 0
    expects: int = 0
    _beats: LoopingCall | None = None

    @classmethod
    def negotiated(cls, client: str | None, offer: tuple[int, int]) -> "HeartBeats":
        """
        STOMP's negotiation: from the client's C{heart-beat} header
        (C{cx,cy}: it sends every cx ms, wants one every cy ms; None: no
        heart-beats) and the router's C{offer} (the same for the router).

        @raise meshroute.stomp.frames.StompProtocolError: a malformed
            header.
        """
        cx, cy = parse_heart_beat(client) if client is not None else (0, 0)
        rx, ry = offer
        return cls(sends=max(rx, cy) if rx and cy else 0,
                   expects=max(ry, cx) if ry and cx else 0)

    @property
    def header(self) -> str:
        "CONNECTED's C{heart-beat}: the router's side of the negotiation."
        return f"{self.sends},{self.expects}"

    @property
    def ttl_ms(self) -> int:
        "The TTL the client's heart-beats make (-1: never)."
        return TTL_PER_HEARTBEAT * self.expects if self.expects else -1

    def start(self, clock: IReactorTime, beat: Callable[[], None]) -> None:
        """
        Call C{beat} every C{sends} ms from now on (if the router sends
        heart-beats at all).
        """
        if self.sends:
            beats = self._beats = LoopingCall(beat)
            beats.clock = clock
            beats.start(self.sends / 1000, now=False)

    def stop(self) -> None:
        "No more heart-beats from the router."
        beats, self._beats = self._beats, None
        if beats is not None and beats.running:
            beats.stop()
