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
"""

from twisted.internet.defer import Deferred


class PeerEpochs:
    """
    Peer router name → the highest epoch seen for it (0 for a name never
    seen with one: a router without HA).

    @param store: an L{meshroute.interfaces.IPeerEpochs}.
    """

    def __init__(self, store) -> None:
        self._store = store
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
