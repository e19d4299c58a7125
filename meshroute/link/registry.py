"""
The router's table of live links.

It enforces the rule that a router name is connected only once: a link
claims its peer's name once the peer has proved it knows the secret (the
listener on a good Authenticate, the connector on a good Authenticated)
and releases it when the connection is gone.  Claiming only after
authentication means a client that does not know the secret cannot squat
a router's name; a name already claimed is refused early, on Hello or
Welcome, before any authentication work.  It also lets the admin API list links and the router close them
all at shutdown.  And it keeps, per peer name and direction, what the
links that held the name carried (L{LinkRegistry.traffic}).

The one exception to "connected once" is a newer instance of the same
router (an HA pair's new active, docs/ha.md): the link from the higher
epoch takes the name, and the link holding it gives it up at once
(L{LinkRegistry.release}) as it closes C{superseded}, before its
connection is gone.

Vote connections (HA votes and heartbeats on the routing listener) and
replication connections (an HA pair's) are held here too, so that
shutdown closes them, but they claim no name and are not links:
L{LinkRegistry.links} leaves them out once their
L{meshroute.wire.frames.VoteHello} or
L{meshroute.wire.frames.ReplicaHello} has said what they are.
"""

import dataclasses

from twisted.internet.defer import Deferred, DeferredList

from meshroute.link.traffic import Traffic

#: How many peers' last closed links are remembered (the oldest goes).
REMEMBERED_CLOSES = 1024


class LinkRegistry:
    """
    Every open link of one router, and which one holds each peer name.

    A link here is a L{meshroute.link.link.Link}, or anything with its
    C{peer}, C{direction}, C{traffic}, C{routing} and C{shutdown()}.
    """

    def __init__(self) -> None:
        self._open: dict[object, Deferred] = {}
        self._by_peer: dict[str, object] = {}
        # (peer, direction) → what the links that held the name and let it
        # go carried.  Only links that proved the secret take a name, so
        # strangers' names never get here.
        self._carried: dict[tuple[str, str], Traffic] = {}
        self._last_closed: dict[str, dict] = {}

    def opened(self, link) -> None:
        """
        C{link} has a connection (any stage).
        """
        self._open[link] = Deferred()

    def closed(self, link) -> None:
        """
        C{link}'s connection is gone: forget it and release its name.
        """
        peer = getattr(link, "peer", None)
        if peer is not None and self._by_peer.get(peer) is link:
            self._let_go(peer, link)
        done = self._open.pop(link, None)
        if done is not None:
            done.callback(None)

    def remember_close(self, link, close: dict) -> None:
        """
        C{link}, which holds its peer's name, has ended as C{close} says
        (L{last_closed}'s fields): remember it as the peer's last close.
        A link that holds no name (it never proved it knows the secret, or
        gave way to a newer epoch's) is not remembered, so a stranger
        cannot fill this.
        """
        peer = link.peer
        if self._by_peer.get(peer) is not link:
            return
        self._last_closed.pop(peer, None)
        if len(self._last_closed) >= REMEMBERED_CLOSES:
            del self._last_closed[next(iter(self._last_closed))]
        self._last_closed[peer] = close

    def last_closed(self) -> dict[str, dict]:
        """
        C{{peer: {"link", "direction", "reason", "detail", "stage",
        "closed_at"}}}: how the last link that held each peer's name ended,
        for the most recent L{REMEMBERED_CLOSES} peers.
        """
        return dict(self._last_closed)

    def is_claimed(self, peer: str) -> bool:
        """
        Whether a live link holds C{peer}.
        """
        return peer in self._by_peer

    def holder(self, peer: str):
        """
        The live link that holds C{peer}, or None.
        """
        return self._by_peer.get(peer)

    def release(self, peer: str, link) -> None:
        """
        C{link} gives up C{peer}'s name before its connection is gone (a
        link from a newer epoch takes its place).
        """
        if self._by_peer.get(peer) is link:
            self._let_go(peer, link)

    def _let_go(self, peer: str, link) -> None:
        del self._by_peer[peer]
        carried = self._carried.setdefault((peer, link.direction), Traffic())
        carried.add(link.traffic)

    def traffic(self) -> dict[tuple[str, str], Traffic]:
        """
        C{(peer, direction)} → what the links that held the peer's name
        carried, the one that holds it now included: counts that only grow.
        """
        totals = {key: dataclasses.replace(carried) for key, carried in self._carried.items()}
        for peer, link in self._by_peer.items():
            totals.setdefault((peer, link.direction), Traffic()).add(link.traffic)
        return totals

    def claim(self, peer: str, link) -> bool:
        """
        Try to make C{link} the one link to C{peer}.

        @return: False when another live link already holds the name.
        """
        holder = self._by_peer.get(peer)
        if holder is not None and holder is not link:
            return False
        self._by_peer[peer] = link
        return True

    def links(self) -> list:
        """
        The open links, in the order they were opened: every connection
        but the vote and replication connections.
        """
        return [link for link in self._open if getattr(link, "routing", True)]

    def connections(self) -> list:
        """
        Every open connection, links and vote connections.
        """
        return list(self._open)

    def close_all(self) -> Deferred:
        """
        Ask every open link to shut down; the result fires when all their
        connections are gone.
        """
        waiting = list(self._open.values())
        for link in list(self._open):
            link.shutdown()
        return DeferredList(waiting)
