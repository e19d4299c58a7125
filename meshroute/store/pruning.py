"""
Forgetting expired duplicate-detection ids: at the store's open, and in
chunks on a timer while the router runs.

The store keeps the id of every message enqueued (C{enqueued_ids}, for
C{dedup_window_s}), the duplicate id of every client send that carried
one (C{duplicate_ids}, for the C{duplicate-id-window}) and the xid of
every two-phase transaction committed (C{committed_xids}, for the same
window: L{meshroute.store.prepared}).  Without pruning
while it runs, a router's disk grows with every message for as long as it
runs, and the next restart deletes all of it in one transaction.

So every L{PRUNE_INTERVAL_S} the L{IdPruner} asks the store to forget the
expired ids of the tables, at most C{chunk} rows per table per store call
(one short transaction each).  While a call deleted a whole chunk there is
probably more: the next chunk follows after L{CHUNK_PAUSE_S}, so other
writes get the writer in between, until a call finds less than a chunk.
The store prunes one chunk of each table when it opens, too.

The tables' rows are in insertion order, so a prune deletes a prefix
(the rows before the first one recorded within the window) and costs
only what it deletes.
"""

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.store.transactions import atomic, lengthy

log = Logger()

#: Most expired ids one prune deletes per table, at
#: L{meshroute.store.sqlite.SQLiteStore.open} and by default in each call
#: of the running router's L{IdPruner}: a prune is one transaction, and
#: one that deleted a backlog of millions (after a long downtime, or a
#: window made shorter) would hold the writer for seconds.
PRUNE_CHUNK = 5000

# Deletes the oldest duplicate ids up to the first one recorded at or after
# the cutoff (all of them if there is none), at most LIMIT of them (-1: no
# limit).  Parameters: cutoff, limit.
_PRUNE_DUPLICATES = (
    "DELETE FROM duplicate_ids WHERE id IN (SELECT id FROM duplicate_ids WHERE id < coalesce("
    "(SELECT id FROM duplicate_ids WHERE at >= ? ORDER BY id LIMIT 1), "
    "(SELECT max(id) + 1 FROM duplicate_ids)) ORDER BY id LIMIT ?)"
)
# The same for enqueued ids, and for committed xids.
_PRUNE_ENQUEUED = _PRUNE_DUPLICATES.replace("duplicate_ids", "enqueued_ids")
_PRUNE_COMMITTED_XIDS = _PRUNE_DUPLICATES.replace("duplicate_ids", "committed_xids")


# Run by the store's executor.


@lengthy
@atomic
def prune_enqueued_ids(connection, cutoff: float, limit: int) -> int:
    return connection.execute(_PRUNE_ENQUEUED, (cutoff, limit)).rowcount


@lengthy
def prune_duplicate_ids(connection, cutoff: float, limit: int) -> int:
    """
    Forget the duplicate ids and the committed xids recorded before
    C{cutoff}, at most C{limit} of each; return the larger count (a full
    chunk of either means more may wait).
    """
    return max(connection.execute(_PRUNE_DUPLICATES, (cutoff, limit)).rowcount,
               connection.execute(_PRUNE_COMMITTED_XIDS, (cutoff, limit)).rowcount)


@lengthy
def prune_one_chunk(connection, cutoff: float, duplicates_cutoff: float) -> None:
    """
    At open: one chunk of each table's expired ids.
    """
    connection.execute(_PRUNE_ENQUEUED, (cutoff, PRUNE_CHUNK))
    connection.execute(_PRUNE_DUPLICATES, (duplicates_cutoff, PRUNE_CHUNK))
    connection.execute(_PRUNE_COMMITTED_XIDS, (duplicates_cutoff, PRUNE_CHUNK))


# While the router runs.

#: How often a running router looks for expired ids (seconds).  The ids
#: live for hours (the windows), so a minute's delay costs nothing.
PRUNE_INTERVAL_S = 60.0
#: The pause between two chunks while more expired ids remain (seconds).
CHUNK_PAUSE_S = 0.05


class IdPruner:
    """
    Prunes a store's expired ids on C{clock}, a chunk per store call.

    @param store: has C{prune(limit)} and C{prune_duplicate_ids(limit)},
        each firing with the number of rows deleted (L{SQLiteStore}).
    """

    def __init__(self, store, clock: IReactorTime, interval_s: float = PRUNE_INTERVAL_S,
                 chunk: int = PRUNE_CHUNK) -> None:
        self._store = store
        self._clock = clock
        self._interval_s = interval_s
        self._chunk = chunk
        self._timer = None
        self._running = False

    def start(self) -> None:
        """
        Prune now (what expired while the router was down), then on the
        timer.
        """
        self._running = True
        self._schedule(0)

    def stop(self) -> None:
        """
        Stop pruning: no chunk is started from now on.  A chunk in
        progress is already queued in the store, which finishes it before
        it closes; its outcome is ignored.  (Waiting for its Deferred
        could wait for ever: on an HA active that stops serving, the
        replication gate never fires what it still holds.)
        """
        self._running = False
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _schedule(self, delay: float) -> None:
        self._timer = self._clock.callLater(delay, self._prune_chunk)

    def _prune_chunk(self) -> None:
        self._timer = None
        pruning = defer.gatherResults(
            [self._store.prune(self._chunk), self._store.prune_duplicate_ids(self._chunk)],
            consumeErrors=True,
        )
        pruning.addCallbacks(self._pruned, self._failed)

    def _pruned(self, deleted: list[int]) -> None:
        if self._running:
            more = any(n >= self._chunk for n in deleted)
            self._schedule(CHUNK_PAUSE_S if more else self._interval_s)

    def _failed(self, failure) -> None:
        if not self._running:
            return
        log.failure("pruning expired duplicate-detection ids failed; trying again in "
                    "{interval} s", failure.value.subFailure, interval=self._interval_s)
        self._schedule(self._interval_s)
