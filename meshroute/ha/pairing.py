"""
Whether the pair's other instance belongs to this instance's group.

Both instances of an HA pair carry the router's name, and the name alone
cannot tell a mistyped C{group-name} apart: two instances of one router
in two groups would each count its own voter and the witnesses, and each
be the active of "its" group, in the same epochs.  So the pair's own
connections (the vote connection to the peer's replication listener and
the replication connection, L{meshroute.wire.frames.VoteHello} and
L{meshroute.wire.frames.ReplicaHello}) carry the asking instance's group,
and the replication listener refuses a peer of another group
(C{group-mismatch}, naming both groups, logged on both sides).

L{Pairing} holds the refusal while it stands: an instance that starts (or
was fenced) does not ask for an epoch while its peer is refused, or
refuses it, and says why in C{GET /api/v1/ha} (C{peer.refusal}); an
instance already serving goes on serving alone.  The refusal stands until
a pair connection of the same group is authenticated (the operator
mended the configuration and restarted the other instance).  The voters'
rule 0 (L{meshroute.harules.quorum}) makes sure of the same without this:
this only makes a typo loud, and keeps an instance from asking in vain.
"""

from twisted.logger import Logger

from meshroute.link import reasons

log = Logger()


class Pairing:
    """
    The group check of one instance's pair connections, and the refusal
    that stands.

    @ivar refusal: why the pair is refused (a line naming both groups), or
        None while nothing is refused.
    """

    def __init__(self, router: str, group: str) -> None:
        self.router = router
        self.group = group
        self.refusal: str | None = None

    def vet(self, peer_group: str) -> str | None:
        """
        The pair's other instance says it is in C{peer_group}: the detail
        of the C{group-mismatch} refusal to send it, or None if it may
        pair.
        """
        if peer_group == self.group:
            return None
        theirs = repr(peer_group) if peer_group else "no group (an older meshroute)"
        self._refused(f"{reasons.GROUP_MISMATCH}: this instance of router {self.router} is in "
                      f"HA group {self.group!r}, the other instance in {theirs}")
        return (f"router {self.router}'s instance here is in HA group {self.group!r}, "
                f"yours in {theirs}")

    def refused_by_peer(self, detail: str) -> None:
        """
        The other instance refused this one's pair connection as
        C{group-mismatch}, saying C{detail}.
        """
        self._refused(f"{reasons.GROUP_MISMATCH}: this instance of router {self.router}, in "
                      f"HA group {self.group!r}, was refused by the other instance: {detail}")

    def matched(self) -> None:
        """
        A pair connection of the same group was authenticated: nothing is
        refused any more.
        """
        if self.refusal is not None:
            log.info("HA group {group}: the other instance of router {router} is in this "
                     "group now; the refusal ({refusal}) is over",
                     group=self.group, router=self.router, refusal=self.refusal)
            self.refusal = None

    def _refused(self, refusal: str) -> None:
        if refusal != self.refusal:
            log.warn("HA group {group}: {refusal}; check ha.group-name in both instances' "
                     "configurations (meshroute check-config FILE FILE): this instance "
                     "does not activate while the refusal stands",
                     group=self.group, refusal=refusal)
        self.refusal = refusal
