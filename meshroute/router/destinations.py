"""
Where a message is for, and how far it may go: the engine's routing
decisions about a message itself (which link it leaves on is
L{meshroute.router.forwarding}'s, and what waits in memory
L{meshroute.router.transient}'s).

 - B{Which destinations does an address have?}  L{Destinations.of}: a
   queue address (C{queue@router}, or a bare queue of this router) has
   exactly one, L{Destination}; so does a topic's (C{topic:NAME}): this
   router's C{$topic} queue, whose fan-out makes the copies for every
   matching subscription across the mesh
   (L{meshroute.router.topic_fan_out}).  What accepts a send
   (L{meshroute.router.acceptance}) takes its one destination, and the
   headers it gives a message (L{Destination.headers}).
 - B{May it go on?}  Not past C{max-hops} links (L{Destinations.beyond_reach});
   and a persistent message that arrives goes into a local queue, on
   toward its destination (a publication's copy into this router's
   C{$topic}, L{Destinations.branching}), or aside: to C{$expired} when its time to
   live ran out, to the dead-letter queue when it crossed too many links
   (L{Destinations.arrival}).
"""

from dataclasses import replace
from typing import NamedTuple

from meshroute.expiry import now_ms, set_aside
from meshroute.messages import (
    DEAD_LETTER_QUEUE,
    EXPIRED_QUEUE,
    PUBLICATION_HEADER,
    TARGETS_HEADER,
    TOPIC_HEADER,
    TOPIC_PREFIX,
    TOPIC_QUEUE,
    AddressError,
    Message,
    parse_address,
)
from meshroute.topics.retained import RETAINED_HEADER
from meshroute.topics.patterns import BadTopic, parse_topic


class Destination(NamedTuple):
    """
    One place a message is for: C{queue} at router C{router}; for a
    publication, its C{topic} too.  A named tuple: one is made per send.
    """

    queue: str
    router: str
    topic: str = ""

    @property
    def address(self) -> str:
        if self.topic:
            return f"{TOPIC_PREFIX}{self.topic}"
        return f"{self.queue}@{self.router}"

    def headers(self, headers: dict) -> dict:
        """
        A send's C{headers} as its message carries them: a publication's
        name its topic, and none of the headers its copies between
        routers carry, nor the flag of a retained message given at
        subscribe time, is taken from a client.
        """
        if not self.topic:
            return headers
        kept = {k: v for k, v in headers.items()
                if k not in (TARGETS_HEADER, PUBLICATION_HEADER, RETAINED_HEADER)}
        kept[TOPIC_HEADER] = self.topic
        return kept


class Destinations:
    """
    The routing decisions of router C{name}: C{routes} is its
    L{RouteTable<meshroute.routing.table.RouteTable>}; a message that has
    crossed C{max_hops} links on its way elsewhere goes no further.
    """

    def __init__(self, name: str, routes, clock, max_hops: int) -> None:
        self.name = name
        self.routes = routes
        self.max_hops = max_hops
        self._clock = clock

    def of(self, address: str) -> tuple[Destination, ...]:
        """
        The destinations of a send to C{address}.

        @raise meshroute.messages.AddressError: when it is malformed.
        """
        if address.startswith(TOPIC_PREFIX):
            topic = address[len(TOPIC_PREFIX):]
            try:
                parse_topic(topic)
            except BadTopic as e:
                raise AddressError(str(e)) from None
            return (Destination(TOPIC_QUEUE, self.name, topic),)
        queue, router = parse_address(address, self.name)
        return (Destination(queue, router),)

    def branching(self, message: Message) -> Message:
        """
        C{message}, or, for a copy of a publication passing through, the
        same copy into this router's own C{$topic} queue, whose fan-out
        sends it on, split where its routers part ways (docs/topics.md).
        Every copy passes through C{$topic} at every router, in the order
        its link brought it: one that only passed through would overtake
        the copies being fanned out here.
        """
        if (message.dest_queue != TOPIC_QUEUE or message.dest_router == self.name
                or TARGETS_HEADER not in message.headers):
            return message
        return replace(message, dest_router=self.name)

    def beyond_reach(self, message: Message) -> bool:
        """
        Whether C{message}, for another router, has crossed as many links
        as it may and goes no further.
        """
        return message.hops >= self.max_hops

    def arrival(self, message: Message) -> tuple[Message, bool, str]:
        """
        Where a persistent message that arrived over a link goes:
        C{(what is stored, for a local queue, why it is set aside here)}:
        C{EXPIRED_QUEUE} when its time to live ran out (wherever it was
        going), or C{"max-hops"} (dead-lettered) when it crossed too many
        links on its way elsewhere; else empty.
        """
        if message.headers and message.expired(now_ms(self._clock)):
            return set_aside(message, self.name), False, EXPIRED_QUEUE
        message = self.branching(message)
        local = message.dest_router == self.name
        if local or not self.beyond_reach(message):
            return message, local, ""
        dead = Message(
            msg_id=message.msg_id, origin=message.origin, dest_router=self.name,
            dest_queue=DEAD_LETTER_QUEUE, body=message.body,
            headers={**message.headers, "x-dead-letter-reason": "max-hops",
                     "x-original-address": f"{message.dest_queue}@{message.dest_router}"},
            hops=message.hops, accepted_at=message.accepted_at,
        )
        return dead, False, "max-hops"
