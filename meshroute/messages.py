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

#: Where a router takes another router's read-only admin requests, and
#: where their answers come back (L{meshroute.admin.mesh}).  These system
#: queues are no queues: a router hands what arrives for them to its admin
#: side before any queue sees it, and no client may address or consume
#: them (L{QUEUE_NAME} has no C{$}).
ADMIN_QUEUE = "$admin"
ADMIN_REPLY_QUEUE = "$admin-reply"
SYSTEM_QUEUES = frozenset((ADMIN_QUEUE, ADMIN_REPLY_QUEUE))


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


class MessageIds:
    """
    Mesh-unique message ids for one router process.
    """

    def __init__(self, router: str) -> None:
        self._prefix = f"{router}:{os.urandom(6).hex()}:"
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter)}"
