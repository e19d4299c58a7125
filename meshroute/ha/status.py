"""
What an HA instance reports about itself: C{GET /api/v1/ha}.

The instance (L{meshroute.ha.instance}) builds an L{HAStatus} when asked;
the admin API renders it with L{HAStatus.describe} as the issue's JSON
object C{{"role", "state", "epoch", "served_epoch", "position", "lag",
"peer", "voters"}}
(docs/ha.md, "Operating a pair").
"""

from dataclasses import dataclass

from meshroute.harules.quorum import LogPosition


@dataclass(frozen=True)
class PeerStatus:
    """
    The other instance of the pair, as this one sees it.

    @ivar endpoint: its replication listener (C{ha.replication.peer}).
    @ivar connected: whether a replication connection to it is up.
    @ivar refusal: why the pair is refused (C{group-mismatch}, naming both
        groups: L{meshroute.ha.pairing}), while it stands: this instance
        does not activate meanwhile; None when nothing is refused.
    """

    endpoint: str
    connected: bool
    refusal: str | None = None


@dataclass(frozen=True)
class VoterStatus:
    """
    One voter of the group other than this instance: the peer instance or
    a witness.

    @ivar name: a witness's router name, or the peer instance's name.
    @ivar endpoint: where its vote connection goes.
    @ivar connected: whether that vote connection is up.
    """

    name: str
    endpoint: str
    connected: bool


@dataclass(frozen=True)
class HAStatus:
    """
    One instance's HA status.

    @ivar role: the configured role, C{primary} or C{backup}.
    @ivar state: one of the six API states of L{meshroute.harules.role}.
    @ivar epoch: the epoch the instance serves in or, while it does not
        serve, the epoch it follows (the active's) or last followed.
    @ivar served_epoch: the epoch it serves or last served in since its
        process started (0 if it has not served).
    @ivar position: how far its store goes (L{LogPosition}).
    @ivar lag: store changes the backup lacks: on the active, its backup
        behind its head; on a backup, itself behind the active's head.
        None when no replication connection tells.
    @ivar peer: the other instance.
    @ivar voters: the other voters of the group.
    """

    role: str
    state: str
    epoch: int
    served_epoch: int
    position: LogPosition
    lag: int | None
    peer: PeerStatus
    voters: tuple[VoterStatus, ...]

    def describe(self) -> dict:
        """
        The JSON object of C{GET /api/v1/ha}.
        """
        return {
            "role": self.role,
            "state": self.state,
            "epoch": self.epoch,
            "served_epoch": self.served_epoch,
            "position": {"epoch": self.position.epoch, "position": self.position.position},
            "lag": self.lag,
            "peer": {"endpoint": self.peer.endpoint, "connected": self.peer.connected,
                     "refusal": self.peer.refusal},
            "voters": [{"name": voter.name, "endpoint": voter.endpoint,
                        "connected": voter.connected} for voter in self.voters],
        }
