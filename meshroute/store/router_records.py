"""
What a router keeps in its store besides messages: its promises as a
witness, and what it remembers of the other routers across restarts.

  - Voter records (C{ha_voter_records}, schema versions 4 and 10;
    L{meshroute.interfaces.IVoterRecords}): a witness's promise per HA
    group it votes for, in rows written alike in an HA instance's own
    database (L{meshroute.store.voter_records}).
  - Peer epochs (C{peer_epochs}, schema version 6;
    L{meshroute.interfaces.IPeerEpochs}): the highest HA epoch seen per
    peer router name, which lets a restarted router still refuse an HA
    instance that lost its place.
  - Known routers (C{known_routers}, schema version 7;
    L{meshroute.interfaces.IKnownRouters}, L{meshroute.routing.known}):
    every router name heard of, written once per name, so that a send to
    a router heard of by an earlier run, or by the active instance whose
    replicated store an HA backup took over, waits in the backlog instead
    of being refused as C{unknown-router}.

L{RouterRecords} implements the three interfaces over an executor's
C{submit}; L{meshroute.store.sqlite.SQLiteStore} is one, on the router's
store, as well as the router's message store: one database, one
executor, one object handed to the witness, the link's epochs and the
known routers.
"""

from zope.interface import implementer

from meshroute.harules.quorum import VoterRecord
from meshroute.interfaces import IKnownRouters, IPeerEpochs, IVoterRecords
from meshroute.store.transactions import atomic
from meshroute.store.voter_records import read_records, save_record


@implementer(IVoterRecords, IPeerEpochs, IKnownRouters)
class RouterRecords:
    """
    A router's voter records, peer epochs and known routers, in the
    database of an executor.
    """

    def __init__(self, submit, now) -> None:
        """
        @param submit: the executor's C{submit}.
        @param now: the time in seconds, when a router is first heard of.
        """
        self._submit = submit
        self._now = now

    def voter_records(self):
        """
        Fires with C{{group: (VoterRecord, lease_timeout_ms)}} for every
        group this router has voted for.
        """
        return self._submit(read_records)

    def save_voter_record(self, group: str, record: VoterRecord, lease_timeout_ms: int):
        """
        Replace C{group}'s voter record; fires with None once durable.
        """
        return self._submit(save_record, group, record, lease_timeout_ms)

    def peer_epochs(self):
        """
        Fires with C{{peer: epoch}}.
        """
        return self._submit(_peer_epochs)

    def save_peer_epoch(self, peer: str, epoch: int):
        """
        Raise C{peer}'s epoch to C{epoch}; fires with None once durable.
        """
        return self._submit(_save_peer_epoch, peer, epoch)

    def known_routers(self):
        """
        Fires with the set of router names saved.
        """
        return self._submit(_known_routers)

    def save_known_routers(self, names):
        """
        Save the router names C{names} not saved yet; fires with None once
        durable.
        """
        return self._submit(_save_known_routers, sorted(names), self._now())


# Run by the executor.


def _peer_epochs(connection) -> dict:
    return dict(connection.execute("SELECT peer, epoch FROM peer_epochs"))


@atomic
def _save_peer_epoch(connection, peer: str, epoch: int) -> None:
    connection.execute(
        "INSERT INTO peer_epochs (peer, epoch) VALUES (?, ?) "
        "ON CONFLICT (peer) DO UPDATE SET epoch = max(epoch, excluded.epoch)",
        (peer, epoch),
    )


def _known_routers(connection) -> set:
    return {router for (router,) in connection.execute("SELECT router FROM known_routers")}


@atomic
def _save_known_routers(connection, names: list, now: float) -> None:
    connection.executemany(
        "INSERT INTO known_routers (router, first_heard) VALUES (?, ?) "
        "ON CONFLICT (router) DO NOTHING",
        [(name, now) for name in names],
    )
