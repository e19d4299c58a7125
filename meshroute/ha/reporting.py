"""
The C{ha.*} events of one HA instance, with the fields docs/events.md
promises ("HA instance events").

The audit reads these records (failovers and their durations), so their
names and fields are a contract; writing them through one object keeps
every caller of the instance to the same fields.  Each record carries the
instance's C{group} and its configured C{role} (C{primary} or C{backup}),
since both instances of a pair write under the same router name.
"""

from twisted.internet.interfaces import IReactorTime

from meshroute import events

#: How an instance became active in a failover: it took over from an
#: active it stopped hearing, or the active handed the epoch over to it
#: (failback, a graceful stop with failover-on-shutdown).
TAKEOVER = "takeover"
HANDOVER = "handover"
FAILOVER_KINDS = (TAKEOVER, HANDOVER)

#: What happened to the active's replication to its backup.
REPLICATION_STATUSES = ("connected", "in-sync", "lost")

#: The steps of a forced activation: recorded by C{meshroute ha
#: force-activate}, carried out by the instance at its next start.
FORCE_STEPS = ("recorded", "activated")


class HAEventLog:
    """
    Writes one instance's C{ha.*} events to the router's event log.

    @param event_log: the L{meshroute.events.EventLog} of the data dir.
    @param clock: the clock the event log stamps with.
    @param group: C{ha.group-name}.
    @param role: C{ha.role}, the configured role.
    """

    def __init__(self, event_log: events.EventLog, clock: IReactorTime, group: str,
                 role: str) -> None:
        self._log = event_log
        self._clock = clock
        self._group = group
        self._role = role

    def _emit(self, event: str, **fields) -> None:
        self._log.emit(event, group=self._group, role=self._role, **fields)

    def state(self, state: str, epoch: int, reason: str | None = None) -> None:
        """
        The instance entered C{state} (one of the six API states), knowing
        C{epoch}; C{reason} says why it stopped serving, if it did.
        """
        self._emit(events.HA_STATE, state=state, epoch=epoch, reason=reason)

    def epoch(self, epoch: int, alone: bool) -> None:
        """
        A majority of voters granted this instance C{epoch}, to run alone
        (confirming without a backup) or replicated.
        """
        self._emit(events.HA_EPOCH, epoch=epoch, mode="alone" if alone else "replicated")

    def fenced(self, epoch: int, reason: str) -> None:
        """
        The instance stopped serving in C{epoch} by itself: C{reason} is
        one of L{meshroute.harules.role}'s (C{lease-lost}, C{superseded},
        C{no-majority}, C{store-failed}).
        """
        self._emit(events.HA_FENCED, epoch=epoch, reason=reason)

    def failover(self, *, from_instance: str, to_instance: str, epoch: int, kind: str,
                 last_heard: float) -> None:
        """
        This instance serves now, in C{epoch}, in place of C{from_instance}.

        The duration runs from C{last_heard} (the clock's seconds when this
        instance last heard the old active's heartbeat, or its hand-over)
        to now: how long the router was unavailable as far as the new
        active can tell.

        @param kind: L{TAKEOVER} or L{HANDOVER}.
        """
        if kind not in FAILOVER_KINDS:
            raise ValueError(f"failover kind must be one of {FAILOVER_KINDS}, not {kind!r}")
        duration_ms = round((self._clock.seconds() - last_heard) * 1000, 3)
        self._emit(events.HA_FAILOVER, **{"from": from_instance, "to": to_instance},
                   epoch=epoch, kind=kind, duration_ms=duration_ms)

    def replication(self, status: str, position: int, lag: int | None) -> None:
        """
        The active's backup connected, caught up (C{in-sync}) or was lost.

        @param position: the active's head position.
        @param lag: how many positions the backup is behind; None when lost.
        """
        if status not in REPLICATION_STATUSES:
            raise ValueError(f"replication status must be one of {REPLICATION_STATUSES}, "
                             f"not {status!r}")
        self._emit(events.HA_REPLICATION, status=status, position=position, lag=lag)

    def force_activate(self, step: str, requested_by: str, epoch: int | None) -> None:
        """
        A forced activation was recorded (C{epoch} None), or carried out
        in C{epoch}.
        """
        if step not in FORCE_STEPS:
            raise ValueError(f"force-activate step must be one of {FORCE_STEPS}, not {step!r}")
        self._emit(events.HA_FORCE_ACTIVATE, step=step, requested_by=requested_by, epoch=epoch)
