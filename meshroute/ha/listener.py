"""
An HA instance's replication listener (C{[ha.replication] listener}):
the one endpoint its peer instance reaches it on.

It is a routing listener's machinery with other parts: the link
handshake (the mesh secret's challenge-response, docs/protocol.md)
admits L{meshroute.wire.frames.VoteHello} connections, answered by the
instance's own L{meshroute.router.witness.Witness} exactly as a router's
routing listener answers them (the peer asks its votes, heartbeats and
start-up question there), and L{meshroute.wire.frames.ReplicaHello}
connections, served by the instance's
L{meshroute.ha.feed.ReplicationServer} (refused C{not-active} unless the
instance is active).  A routing L{meshroute.wire.frames.Hello} is
refused C{not-allowed}: routing links go to the routing listener, which
only the active instance runs.  Either kind from an instance of another
HA group is refused C{group-mismatch} (L{meshroute.ha.pairing}).
"""

from twisted.internet.interfaces import IReactorTime

from meshroute import events
from meshroute.ha.feed import ReplicationServer
from meshroute.ha.pairing import Pairing
from meshroute.link.context import RouterContext
from meshroute.link.link import ListenerFactory
from meshroute.link.registry import LinkRegistry
from meshroute.link.settings import ListenerSettings
from meshroute.router.witness import Witness


def replication_listener(name: str, clock: IReactorTime, event_log: events.EventLog,
                         registry: LinkRegistry, witness: Witness, server: ReplicationServer,
                         settings: ListenerSettings, pairing: Pairing) -> ListenerFactory:
    """
    The factory of an HA instance's replication listener.

    @param name: the router name the instance shares with its peer.
    @param registry: holds its connections, so that the instance's stop
        closes them (C{registry.close_all()}).
    @param witness: the instance's own voter for its group (its records
        in the instance's C{ha.db}).
    @param pairing: the instance's group check: a peer of another group is
        refused C{group-mismatch}.
    """
    context = RouterContext(name=name, clock=clock, events=event_log, registry=registry,
                            engine=None, witness=witness, replication=server,
                            group=pairing.group, pairing=pairing)
    return ListenerFactory(context, settings)
