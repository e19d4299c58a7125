"""
The STOMP versions the router speaks, and what each means for a
connection (docs/stomp.md, "Versions"): the one a CONNECT's
C{accept-version} settles, and the rules of each, side by side.

 - B{1.2} and B{1.1}, as their specifications say.  An C{ACK} or C{NACK}
   names a message by the C{ack} header of its C{MESSAGE} (1.2, header
   C{id}) or by its C{message-id} (1.1).
 - B{1.0}, the version of a client that sends no C{accept-version} (the
   1.1 specification: "the client only supports version 1.0"), or offers
   only 1.0, as ActiveMQ, Artemis and RabbitMQ serve it: no heart-beats
   (a C{heart-beat} header is not read, and C{CONNECTED} carries none), no
   C{NACK} (an C{ERROR}, as Artemis answers it), an C{ACK} names the
   C{message-id}, and a C{SUBSCRIBE} need not carry an C{id}: the
   subscription is then known by its destination, which an C{UNSUBSCRIBE}
   may name instead of an C{id}.  C{CONNECTED} carries C{version:1.0}, as
   RabbitMQ's does: a 1.0 client ignores it, and one that offered 1.0
   sees what it got.  How 1.0 headers are read and written (no escapes) is
   L{meshroute.stomp.frames}'.

Over WebSocket the subprotocol sets a ceiling (L{meshroute.stomp.websocket}):
the version is the best both sides speak, not above it.  A client offering
only versions the router does not speak gets an C{ERROR} carrying the
C{version} header the specification asks for: the versions it could have
had (L{spoken}).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class StompVersion:
    """
    What one STOMP version means for a connection.

    @ivar number: as C{accept-version} and C{version} write it.
    @ivar heart_beats: whether heart-beats are negotiated.
    @ivar nack: whether C{NACK} exists.
    @ivar ack_header: the header of C{ACK} and C{NACK} that names the
        message: C{id} (the C{MESSAGE}'s C{ack}) or C{message-id}.
    @ivar subscription_ids: whether C{SUBSCRIBE} and C{UNSUBSCRIBE} must
        carry C{id}.
    """

    number: str
    heart_beats: bool
    nack: bool
    ack_header: str
    subscription_ids: bool


V1_2 = StompVersion("1.2", heart_beats=True, nack=True, ack_header="id",
                    subscription_ids=True)
V1_1 = StompVersion("1.1", heart_beats=True, nack=True, ack_header="message-id",
                    subscription_ids=True)
V1_0 = StompVersion("1.0", heart_beats=False, nack=False, ack_header="message-id",
                    subscription_ids=False)

#: The versions the router speaks, best first.
VERSIONS = (V1_2, V1_1, V1_0)


def offered(accept_version: str | None) -> set[str]:
    """
    The versions a CONNECT's C{accept-version} offers (none: 1.0 alone).
    """
    if accept_version is None:
        return {V1_0.number}
    return {number.strip() for number in accept_version.split(",")}


def spoken(ceiling: str | None = None) -> list[str]:
    """
    The versions the router speaks on a connection whose transport allows
    none above C{ceiling} (None: any), lowest first, as the C{version}
    header of a version-negotiation C{ERROR} lists them.
    """
    return sorted(v.number for v in VERSIONS if ceiling is None or v.number <= ceiling)


def negotiated(accept_version: str | None, ceiling: str | None = None) -> StompVersion | None:
    """
    The best version both the client (its C{accept-version}) and the
    router speak, not above C{ceiling}; None when there is none.
    """
    wanted = offered(accept_version)
    allowed = spoken(ceiling)
    for version in VERSIONS:
        if version.number in wanted and version.number in allowed:
            return version
    return None
