"""
Messages and addresses.

A message is addressed C{queue@router}; a bare C{queue} means the router
the client is connected to.  Its C{msg_id} is unique in the whole mesh
(the origin router's name, the origin process's boot id and a counter),
so any router can recognise a duplicate.
"""

import itertools
import os
import re
from dataclasses import dataclass, field

from meshroute.errors import MeshrouteError

ROUTER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
QUEUE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")

#: Where a router puts messages that exceeded max-hops.
DEAD_LETTER_QUEUE = "$dead-letter"

#: Where a router puts messages whose time to live ran out before they
#: were delivered (docs/client-protocol.md "Message expiry").
EXPIRED_QUEUE = "$expired"

#: Where a router's topic publications wait for its fan-out
#: (L{meshroute.router.topic_fan_out}): a client's publication, or a copy
#: a neighbour sent it for the routers beyond.  No client addresses or
#: consumes it (L{QUEUE_NAME} has no C{$}); a publication is sent to
#: C{TOPIC_PREFIX + name}.
TOPIC_QUEUE = "$topic"
TOPIC_PREFIX = "topic:"
#: The prefixes of a topic subscription's queue at its router: a durable
#: one's (C{$durable:CLIENT:NAME}), a non-durable one's (C{$subscriber:N})
#: (L{meshroute.router.topic_subscriptions}).
DURABLE_PREFIX = "$durable:"
SUBSCRIBER_PREFIX = "$subscriber:"
#: The headers a publication carries through the mesh: its topic, the id
#: its publisher's router gave it (every copy's id derives from it), and,
#: on a copy between routers, the routers it is for.
TOPIC_HEADER = "x-topic"
PUBLICATION_HEADER = "x-publication"
TARGETS_HEADER = "x-topic-targets"

#: The header that carries a message's expiry: absolute wall-clock epoch
#: milliseconds (as JMS's JMSExpiration and STOMP's C{expires}).  A header,
#: so that it travels with the message through the store and over links of
#: every protocol version unchanged; a router that knows nothing of expiry
#: carries it like any other header.
EXPIRES_HEADER = "x-expires-ms"

#: The header of a message whose sender asked to be told if it expires:
#: what the sender's session at the origin router is known by for it (not
#: the session's id: consumers see the header).
NOTIFY_EXPIRY_HEADER = "x-notify-expiry"

#: The address (at the origin router) of the notices that tell a sender
#: its message expired at another router: non-persistent system messages
#: a router takes itself, never enqueued (L{meshroute.expiry}).
EXPIRY_NOTICES = "$expiry-notices"

#: Where a router takes another router's read-only admin requests, and
#: where their answers come back (L{meshroute.router.remote_views}).  These system
#: queues are no queues: a router hands what arrives for them to its admin
#: side before any queue sees it, and no client may address or consume
#: them (L{QUEUE_NAME} has no C{$}).
ADMIN_QUEUE = "$admin"
ADMIN_REPLY_QUEUE = "$admin-reply"
#: Where a router takes the notices that another router holds its topic
#: interest at a version (L{meshroute.router.mesh_wide}).
INTEREST_HELD = "$interest-held"
#: Where a router takes the retained topic messages its neighbours flood
#: (L{meshroute.router.retained}).
RETAINED_QUEUE = "$retained"
SYSTEM_QUEUES = frozenset((ADMIN_QUEUE, ADMIN_REPLY_QUEUE, EXPIRY_NOTICES, INTEREST_HELD,
                           RETAINED_QUEUE))


class AddressError(MeshrouteError):
    """
    An address is not C{queue} or C{queue@router} with valid names.
    """

    code = "bad-address"


def parse_address(address: str, local_router: str) -> tuple[str, str]:
    """
    Split C{address} into (queue, router); a bare queue is local.

    @raise AddressError: when either part is malformed.
    """
    queue, at, router = address.partition("@")
    if not at:
        router = local_router
    if not QUEUE_NAME.match(queue):
        raise AddressError(f"invalid queue name in address {address!r}")
    if not ROUTER_NAME.match(router):
        raise AddressError(f"invalid router name in address {address!r}")
    return queue, router


@dataclass(frozen=True, slots=True)
class Message:
    """
    One message, as stored and as forwarded.

    @ivar hops: how many links it has crossed; past max-hops it is
        dead-lettered.
    @ivar accepted_at: when the origin router made it durable (epoch
        seconds), for end-to-end latency.
    @ivar persistent: False for the in-memory fast path (JMS
        NON_PERSISTENT): never stored, may be lost, never duplicated.
    """

    msg_id: str
    origin: str
    dest_router: str
    dest_queue: str
    body: bytes
    headers: dict = field(default_factory=dict)
    hops: int = 0
    persistent: bool = True
    accepted_at: float = 0.0

    @property
    def expires_ms(self) -> int:
        """
        When it expires (epoch milliseconds), 0 for never.
        """
        return expires_ms(self.headers)

    def expired(self, now_ms: int) -> bool:
        """
        Whether its time ran out at C{now_ms}: never for one already set
        aside in a system queue (C{$expired}, C{$dead-letter}), which is
        where expiry would send it.
        """
        if not self.headers or self.dest_queue.startswith("$"):
            return False
        expiry = expires_ms(self.headers)
        return 0 < expiry <= now_ms


_new_object = object.__new__
# Each field's slot, set directly (by name: the fields' order may change).
_set_msg_id = Message.__dict__["msg_id"].__set__
_set_origin = Message.__dict__["origin"].__set__
_set_dest_router = Message.__dict__["dest_router"].__set__
_set_dest_queue = Message.__dict__["dest_queue"].__set__
_set_body = Message.__dict__["body"].__set__
_set_headers = Message.__dict__["headers"].__set__
_set_hops = Message.__dict__["hops"].__set__
_set_persistent = Message.__dict__["persistent"].__set__
_set_accepted_at = Message.__dict__["accepted_at"].__set__


def message_of(msg_id: str, origin: str, dest_router: str, dest_queue: str, body: bytes,
               headers: dict, hops: int, persistent: bool, accepted_at: float) -> Message:
    """
    C{Message(msg_id, ..., accepted_at)}, every field given, made at half
    the cost of the frozen dataclass's C{__init__} (which sets each field
    through C{object.__setattr__}): for the paths that make one per
    message at full rate (a send accepted, a transfer arrived).
    """
    message = _new_object(Message)
    _set_msg_id(message, msg_id)
    _set_origin(message, origin)
    _set_dest_router(message, dest_router)
    _set_dest_queue(message, dest_queue)
    _set_body(message, body)
    _set_headers(message, headers)
    _set_hops(message, hops)
    _set_persistent(message, persistent)
    _set_accepted_at(message, accepted_at)
    return message


def expires_ms(headers: dict) -> int:
    """
    The expiry C{headers} carry (L{EXPIRES_HEADER}), 0 for none or for a
    value that is not a number of milliseconds (a header set by hand).
    """
    value = headers.get(EXPIRES_HEADER) if headers else None
    if not value:
        return 0
    try:
        return max(0, int(value))
    except ValueError:
        return 0


def expiry_headers(headers: dict, expires_at_ms: int, notify_session: str) -> dict:
    """
    C{headers} with the expiry headers of a send that expires at
    C{expires_at_ms} (0: never) and whose sender's session
    C{notify_session} (empty: none) is told if it does.  Without either,
    C{headers} itself (the common case costs nothing).
    """
    if not expires_at_ms:
        return headers
    headers = {**headers, EXPIRES_HEADER: str(expires_at_ms)}
    if notify_session:
        headers[NOTIFY_EXPIRY_HEADER] = notify_session
    return headers


class MessageIds:
    """
    Mesh-unique message ids for one router process.
    """

    def __init__(self, router: str) -> None:
        self._prefix = f"{router}:{os.urandom(6).hex()}:"
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter)}"
