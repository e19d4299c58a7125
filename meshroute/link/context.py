"""
What a connection is given besides its settings: the router it belongs to
(L{RouterContext}, shared by all its links) and, for the connector side of
a vote connection, who its answers go to (L{VoteSide}).
"""

from dataclasses import dataclass
from typing import Protocol

from twisted.internet.interfaces import IReactorTime

from meshroute import events
from meshroute.wire.frames import HeartbeatAnswer, StartAnswer, VoteAnswer


class VoteSide(Protocol):
    """
    Who a connector's vote connection reports to (its
    L{meshroute.ha.voters.WitnessConnection}).
    """

    def voting(self, link) -> None:
        """
        The witness accepted our proof: requests may be sent from now on,
        through C{link.ask} (a L{meshroute.link.link.Link}).
        """

    def answered(self, frame: VoteAnswer | HeartbeatAnswer | StartAnswer) -> None:
        "The witness answered a request, a heartbeat or the start-up question."

    def closed(self, core) -> None:
        """
        The connection is gone: C{core} (its L{meshroute.link.core.LinkCore})
        says where and why (C{core.stage}, C{core.close_reason}).
        """


@dataclass(frozen=True)
class RouterContext:
    """
    What every link of one router shares.

    @ivar engine: the router's L{meshroute.interfaces.ILinkEngine}: it
        makes the recovery stage's L{meshroute.wire.frames.Recovery} (last
        sequence received from the peer, and the store ids it belongs to)
        and takes over each link's delivery stage.
    @ivar witness: the router's L{meshroute.router.witness.Witness}, which
        answers vote connections; None: a L{meshroute.wire.frames.VoteHello}
        is refused (C{version}), as by a router without vote connections.
    @ivar replication: on an HA instance's replication listener, its
        L{meshroute.ha.feed.ReplicationServer}, which serves replication
        connections; None: a L{meshroute.wire.frames.ReplicaHello} is
        refused (C{version}).  That listener's context has no C{engine}: a
        L{meshroute.wire.frames.Hello} is refused (C{not-allowed}); and
        there the peer has the listener's own router name (the pair's other
        instance), and no other.
    @ivar epoch: the epoch this instance of the router serves in (the
        active instance of an HA pair); 0 for a router without HA.
    @ivar group: an HA instance's group (C{ha.group-name}), which its vote
        and replication connections carry; "" for a router without HA.
    @ivar pairing: on an HA instance's replication listener and on its
        connections to the pair's other instance, its
        L{meshroute.ha.pairing.Pairing}: the listener refuses a peer of
        another group (C{group-mismatch}), and it is told of that refusal
        from either side and of each pair connection authenticated; None
        elsewhere.
    @ivar peer_epochs: the L{meshroute.link.epochs.PeerEpochs} of the
        router; None (a context without a store, in tests of other
        concerns): no epoch is remembered, so only the link holding a name
        is compared with.
    """

    name: str
    clock: IReactorTime
    events: events.EventLog
    registry: object
    engine: object
    witness: object = None
    replication: object = None
    epoch: int = 0
    peer_epochs: object = None
    group: str = ""
    pairing: object = None
