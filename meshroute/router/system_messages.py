"""
Routers' own messages to each other's system queues
(L{meshroute.messages.SYSTEM_QUEUES}): expiry notices
(L{meshroute.router.expired}), admin requests and their answers
(L{meshroute.router.remote_views}).  They are no part of the mesh's
traffic: non-persistent, recorded by no event, and never waiting: with no
live route one is not sent.
"""

from typing import Callable

from twisted.logger import Logger

from meshroute.messages import Message

log = Logger()


class SystemMessages:
    """
    The system queues of router C{name}: who takes what arrives for each
    (L{serve}), and the sending of its own (L{send}) on the link to the
    next hop, as C{forwarding} (L{meshroute.router.forwarding.Forwarding})
    has it, no further than C{destinations} lets a message go
    (L{meshroute.router.destinations.Destinations.beyond_reach}).
    """

    def __init__(self, name: str, destinations, forwarding) -> None:
        self._name = name
        self._destinations = destinations
        self._forwarding = forwarding
        self._handlers: dict[str, Callable[[Message], None]] = {}

    def serve(self, queue: str, handler: Callable[[Message], None]) -> None:
        """
        Hand C{handler} every message that arrives for C{queue}, one of
        this router's system queues.
        """
        self._handlers[queue] = handler

    def send(self, message: Message) -> bool:
        """
        Send a router's own non-persistent message to a system queue of
        another router (or of this one), on the next hop's link now.

        @return: whether it was sent (or, for this router, handed over).
        """
        if message.dest_router == self._name:
            handler = self._handlers.get(message.dest_queue)
            if handler is not None:
                handler(message)
            return True
        if self._destinations.beyond_reach(message):
            return False
        channel = self._forwarding.channel_towards(message.dest_router)
        if channel is None:
            return False
        channel.send_transient(message)
        return True

    def arrived(self, message: Message) -> None:
        """
        A system message arrived from a peer: for us, or passing through.
        """
        if not self.send(message):
            log.info("a message for {queue}@{router} from {origin} has no route on; dropped",
                     queue=message.dest_queue, router=message.dest_router,
                     origin=message.origin)
