"""
What an HA instance reports about itself: C{GET /api/v1/ha}.

The instance (L{meshroute.ha.instance}) builds an L{HAStatus} when asked;
the admin API renders it with L{HAStatus.describe} as the issue's JSON
object C{{"role", "state", "epoch", "served_epoch", "position", "lag",
"peer", "voters"}}, with the instance's name first (docs/ha.md,
"Operating a pair").
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

    @ivar instance: its name, as it votes (C{router-b/backup}:
        L{meshroute.harules.quorum.instance_name}), which tells apart
        the instances one process may run (docs/ha.md, "Colocated
        backups").
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

    instance: str
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
            "instance": self.instance,
            "policy": "replication",
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


@dataclass(frozen=True)
class LiveStatus:
    """
    The shared store's live lock, as a waiting instance sees it.

    @ivar held: whether the other instance holds the live lock.
    @ivar owner: the role that last wrote the lock file's record.
    @ivar epoch: the epoch it serves (or last served) in.
    @ivar heartbeat_silent_s: seconds since its heartbeat last changed,
        while it holds the lock; None otherwise.
    """

    held: bool
    owner: str
    epoch: int
    heartbeat_silent_s: float | None


@dataclass(frozen=True)
class SharedStoreStatus:
    """
    One shared-store instance's HA status (docs/ha.md, "Shared store"):
    C{{"instance", "policy", "role", "state", "epoch", "served_epoch",
    "lock", "failback_requested", "live"}}.

    @ivar instance: its name (L{HAStatus.instance}).
    @ivar state: one of L{meshroute.harules.shared_store.API_STATES}.
    @ivar lock: the lock file's path.
    @ivar failback_requested: whether a primary waits to take the store
        back (this instance's request, or, seen by the active, its peer's).
    @ivar live: the live lock as seen while waiting; None while serving.
    """

    instance: str
    role: str
    state: str
    epoch: int
    served_epoch: int
    lock: str
    failback_requested: bool
    live: LiveStatus | None
    #: What a replicated pair's status has and a shared-store pair does
    #: not: no replication connection, no lag.
    peer = None
    lag = None

    def describe(self) -> dict:
        live = self.live
        return {
            "instance": self.instance,
            "policy": "shared-store",
            "role": self.role,
            "state": self.state,
            "epoch": self.epoch,
            "served_epoch": self.served_epoch,
            "lock": self.lock,
            "failback_requested": self.failback_requested,
            "live": None if live is None else {
                "held": live.held, "owner": live.owner, "epoch": live.epoch,
                "heartbeat_silent_s": (None if live.heartbeat_silent_s is None
                                       else round(live.heartbeat_silent_s, 3))},
        }
