"""
The start record of each epoch: which instances were in sync in it, and
so which epoch an instance may claim for its data (docs/ha.md,
"Epochs").

The active writes it as the epoch's first change, on its serving store's
connection (L{start_epoch}, submitted to the store's executor), so that
it is replicated with the rest; the backup's replica reads what the
newest starts it holds said (L{EpochStarts}).  The record lives in the
store's C{replication_state} row (schema version 8), beside the
position the store keeps there itself (L{meshroute.store.changes}).
"""

from dataclasses import dataclass

#: What the latest epoch starts said (schema version 8): see L{EpochStarts}.
READ_EPOCH_STARTS = (
    "SELECT replicated_epoch, alone_epoch, alone_instance FROM replication_state")
_START_REPLICATED = "UPDATE replication_state SET replicated_epoch = ?"
_START_ALONE = "UPDATE replication_state SET alone_epoch = ?, alone_instance = ?"


@dataclass(frozen=True)
class EpochStarts:
    """
    What the newest epoch starts a store holds said (docs/ha.md
    "Epochs"): every epoch begins with a start record, a change of its
    own, which names the instances in sync in it: both (the epoch is run
    replicated), or only the active (run alone).

    @ivar replicated: the newest epoch whose start named both instances.
    @ivar alone: the newest epoch run alone, by C{alone_instance}.
    """

    replicated: int = 0
    alone: int = 0
    alone_instance: str = ""

    def newest_naming(self, instance: str) -> int:
        """
        The newest epoch whose start record names C{instance}: the epoch
        it may claim for its data in a vote.  (Its own older alone epochs
        do not matter: a newer alone epoch of the peer raised every
        granting voter's confirmed position above them.)
        """
        own = self.alone if self.alone_instance == instance else 0
        return max(self.replicated, own)


def start_epoch(connection, epoch: int, active: str, alone: bool) -> None:
    """
    Write the start record of C{epoch}, the epoch's first change (on the
    serving store's connection, so that it is replicated): run alone by
    C{active}, or replicated.
    """
    if alone:
        connection.execute(_START_ALONE, (epoch, active))
    else:
        connection.execute(_START_REPLICATED, (epoch,))
