"""
The frame of topic subscriptions, version 8 of the native client
protocol (L{meshroute.wire.client_frames} gathers it with the others,
and gives L{Unsubscribe<meshroute.wire.client_frames.Unsubscribe>} its
C{forget} field): a subscription to the publications whose topic
matches a pattern, made through the mesh's interest routing and
consumed as a queue subscription is (credit, acknowledgements,
redelivery).  A publication needs no frame of its own: it is a C{Send}
to the address C{topic:NAME}.

The pattern's words are checked by the router, which answers a bad one
C{bad-address} (a command's answer, as for a Subscribe's queue name),
not by the codec: the frame only has the types its fields declare.
docs/client-protocol.md, "Topics", tells when the frame may be sent and
how it is answered; docs/topics.md what a subscription is promised.

Version 9 adds C{retained} (L{RETAINED_VERSION
<meshroute.wire.client_frames.RETAINED_VERSION>}): the retained messages
a subscription is given as it is made.
"""

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class SubscribeTopic:
    """
    Client → router, command: consume the publications whose topic
    matches C{pattern} (C{prices.*.gbp}, C{prices.#}), as subscription
    C{subscription} of the session (a number of the client's choice,
    unique among its live subscriptions, Subscribe's included), with the
    initial C{credit}.

    Non-durable (C{durable} empty): the subscription lives with the
    session.  Durable: subscription C{durable} of client C{client_id}
    (empty: the session's client id), which the router records and which
    keeps collecting while no client consumes it, until an
    C{Unsubscribe} with C{forget}; with C{shared}, several consumers may
    consume it at once, each publication to one of them.  C{mesh_wide}
    asks the router to confirm only once the subscription's interest
    reached every router it can reach now.  C{retained} (version 9):
    C{none}, or the retained messages matching the pattern are placed
    into the subscription first, C{all} of them, or (C{if-new}) only if
    the subscription is new (a durable one that exists with this
    pattern is given none); docs/topics.md, "Retained messages".

    Answered C{Confirm} once the router made the subscription (a durable
    one recorded in its store), or C{Error}: C{bad-address} (pattern,
    client id or name malformed), C{subscription-in-use} (a durable one
    that is not shared has its consumer already), C{timeout} (a mesh-wide
    one whose interest did not reach every router in time: it was not
    made), C{not-allowed}, C{invalid-argument}, C{limit-reached}.  The last five fields may be
    left off the wire while they hold their defaults.
    """

    TYPE: ClassVar[int] = 35
    OPTIONAL_TAIL: ClassVar[int] = 5
    command_id: int
    subscription: int
    pattern: str
    credit: int
    durable: str = ""
    client_id: str = ""
    shared: bool = False
    mesh_wide: bool = False
    retained: str = "none"
