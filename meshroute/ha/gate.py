"""
When the active instance may tell anyone about a committed store change.

The store's executor (L{meshroute.store.transactions}, C{replication=gate})
hands the gate each transaction that wrote, as C{prepared(batch)} once its
statements ran and before its COMMIT, and then every transaction it ends,
in commit order, as C{committed(batch_or_None, fire)} (the store's
L{meshroute.interfaces.ICommitGate}): C{batch} the transaction's
L{meshroute.store.changes.ChangeBatch} (None when it wrote nothing, or
failed), C{fire} what tells its callers.  The gate passes every batch on
to the L{ReplicationSource} as soon as it is prepared, so that the
backup receives, commits and acknowledges it while the active's own
commit (its fsync) runs, and calls each C{fire} when its transaction is
committed and the mode allows:

  - C{alone}: at once.  The active runs without a backup, after a
    majority of voters recorded that it does (or before any backup
    exists).
  - C{replicated}: a batch when the backup acknowledged its position
    (L{acknowledged}); the backup holds it (fsynced with C{replica-sync =
    "full"}) before any caller learns of it.
  - C{held}: never, until the mode changes.  The backup fell silent and
    no majority recorded yet that the active runs alone: nothing may be
    confirmed that a promotable backup might lack.

Whatever the mode, the gate fires strictly in commit order: a later
transaction, even one that only read (or failed), never fires before an
earlier one, because what it tells its caller may show the earlier,
unconfirmed change (a read of a queue holding a message whose send is not
confirmed yet must not deliver it).

Shipping before the commit means the backup may hold a batch the active
never commits (docs/ha.md, "Shipping before the commit"): no caller
learned of it, so that is an unconfirmed change that survived, as when
the active crashes between the two.  But an active that lives on without
it would commit another batch at the same position, and the two stores
would differ under one (epoch, position).  So a batch L{abandoned} (its
COMMIT failed) stops the gate for good: nothing fires again, and the
instance stops serving (L{meshroute.ha.store_replication}).

The role's actions map to the modes: C{hold_acknowledgements} to
L{ReplicationGate.hold_acknowledgements}, C{release_acknowledgements}
(the voters recorded that the active runs alone) to
L{ReplicationGate.run_alone}, a replicated epoch to
L{ReplicationGate.run_replicated}.  The epoch the executor tags batches
with is L{ReplicationGate.epoch}: set it (C{serve_in}) before the first
transaction of the new epoch.
"""

from collections import deque

from zope.interface import implementer

from meshroute.harules.quorum import LogPosition
from meshroute.interfaces import ICommitGate

ALONE = "alone"
REPLICATED = "replicated"
HELD = "held"


@implementer(ICommitGate)
class ReplicationGate:
    """
    The active's gate between its store's commits and their confirmation.
    Called on the reactor thread only.

    @ivar epoch: the epoch the active serves in: what the executor tags
        each new batch with.
    @ivar mode: L{ALONE}, L{REPLICATED} or L{HELD}.
    @ivar acknowledged_position: the highest position the backup
        acknowledged.
    @ivar committed_head: the epoch and position of the last batch the
        store committed (the source's head is the last one prepared).
    @ivar failed: a prepared batch was abandoned: nothing fires any more.
    """

    def __init__(self, source, epoch: int, mode: str = ALONE) -> None:
        """
        @param source: the L{ReplicationSource} every batch is appended to.
        @param epoch: the epoch to tag batches with.
        @param mode: the first mode.
        """
        if mode not in (ALONE, REPLICATED, HELD):
            raise ValueError(f"no gate mode {mode!r}")
        self.epoch = epoch
        self.mode = mode
        self.acknowledged_position = 0
        self.committed_head = source.head
        self.failed = False
        self._source = source
        # (position or None, fire) of the transactions not fired yet, in
        # commit order.
        self._waiting: deque = deque()

    @property
    def waiting(self) -> int:
        """
        How many ended transactions wait to be confirmed.
        """
        return len(self._waiting)

    def prepared(self, batch) -> None:
        """
        The store is committing C{batch}: it goes to the source, and so to
        the backup, now.
        """
        if not self.failed:
            self._source.append(batch)

    def abandoned(self, batch) -> None:
        """
        The store's COMMIT of the prepared C{batch} failed: the backup
        may hold what this store does not.  Fire nothing from now on.
        """
        self.failed = True

    def committed(self, batch, fire) -> None:
        """
        The executor ended a transaction: C{batch} (the L{ChangeBatch} it
        prepared, or None) is in the store, C{fire} waits its turn.
        """
        if batch is not None:
            self.committed_head = LogPosition(batch.epoch, batch.position)
        self._waiting.append((None if batch is None else batch.position, fire))
        self._release()

    def acknowledged(self, position: int) -> None:
        """
        The backup holds every batch up to C{position}.
        """
        if position > self.acknowledged_position:
            self.acknowledged_position = position
            self._release()

    def run_alone(self) -> None:
        """
        Confirm everything at once, from now on (and all that waits).
        """
        self.mode = ALONE
        self._release()

    def run_replicated(self) -> None:
        """
        Confirm each batch once the backup acknowledged it.
        """
        self.mode = REPLICATED
        self._release()

    def hold_acknowledgements(self) -> None:
        """
        Confirm nothing until the mode changes.
        """
        self.mode = HELD

    def _release(self) -> None:
        """
        Fire, in order, what the mode allows.
        """
        waiting = self._waiting
        mode = self.mode
        if mode == HELD or self.failed:
            return
        alone = mode == ALONE
        while waiting:
            position, fire = waiting[0]
            if not (alone or position is None or position <= self.acknowledged_position):
                return
            waiting.popleft()
            fire()
