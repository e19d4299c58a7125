"""
The highest epoch this router has seen for each peer router name.

The two instances of an HA pair share one router name (docs/ha.md); the
active one serves in the newest epoch its voters granted, and says so in
its L{meshroute.wire.frames.Hello} or L{meshroute.wire.frames.Welcome}.
A link from an epoch lower than the highest this router has ever seen
for that name comes from an instance that lost its place (a frozen or
partitioned old active): the handshake refuses it (C{stale-epoch}).

"Ever seen" must hold across restarts, or a restarted router would take
the stale instance back: so a higher epoch is made durable in the store
(L{meshroute.interfaces.IPeerEpochs}) before the link that brought it is
admitted, and the epochs are loaded when the router opens its store.
Only an authenticated peer raises an epoch: a Hello proves nothing, and
an epoch raised by anyone could fence a router out of the mesh.

The epoch also arrives in route advertisements, relayed by mesh members
(L{PeerEpochs.heard}): a router that only dials a pair's instances (its
connector lists both) hears there that the other instance took over,
while its own link to the old one, frozen or partitioned, could stay up
until its keepalive notices (five keepalive intervals).  It raises the
epoch and closes that link (C{superseded}) at once, so that its
connector moves on to the other endpoint.
"""

from twisted.internet.defer import Deferred
from twisted.logger import Logger

log = Logger()


class PeerEpochs:
    """
    Peer router name → the highest epoch seen for it (0 for a name never
    seen with one: a router without HA).

    @param store: an L{meshroute.interfaces.IPeerEpochs}.
    @param registry: the router's L{meshroute.link.registry.LinkRegistry},
        whose link to a peer from an older epoch L{heard} closes.
    """

    def __init__(self, store, registry) -> None:
        self._store = store
        self._registry = registry
        self._highest: dict[str, int] = {}

    def load(self) -> Deferred:
        """
        Read the epochs saved by previous runs; call before any link.
        """
        return self._store.peer_epochs().addCallback(self._highest.update)

    def highest(self, peer: str) -> int:
        """
        The highest epoch durably seen for C{peer}.
        """
        return self._highest.get(peer, 0)

    def raise_to(self, peer: str, epoch: int) -> Deferred | None:
        """
        Make C{epoch} the highest seen for C{peer}, durably.

        @return: None when it is not higher than what is held (nothing to
            save); else a Deferred that fires once it is durable (and
            L{highest} says so), or fails if it could not be saved.
        """
        if epoch <= self.highest(peer):
            return None
        saving = self._store.save_peer_epoch(peer, epoch)
        return saving.addCallback(self._saved, peer, epoch)

    def _saved(self, _, peer: str, epoch: int) -> None:
        self._highest[peer] = max(epoch, self.highest(peer))

    def heard(self, peer: str, epoch: int) -> None:
        """
        A route advertisement of C{peer} from C{epoch} was taken: when that
        epoch is news, raise it, and once it is durable, close a link to
        C{peer} from an older epoch (C{superseded}).
        """
        saving = self.raise_to(peer, epoch)
        if saving is None:
            return
        saving.addCallback(lambda _: self._supersede_older(peer, epoch))
        saving.addErrback(lambda f: log.failure(
            "saving epoch {epoch} of {peer}, heard in its route advertisement", f,
            peer=peer, epoch=epoch))

    def _supersede_older(self, peer: str, epoch: int) -> None:
        holder = self._registry.holder(peer)
        if holder is not None and holder.core.peer_epoch < epoch:
            holder.supersede(epoch)
