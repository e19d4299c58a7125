"""
The durable message store: where a router keeps its queues and the
messages in flight through it.

L{SQLiteStore} implements L{meshroute.interfaces.IMessageStore} on SQLite
in WAL mode, with group commit: by an L{AdaptiveExecutor} (small turns
at their end on the reactor thread, the rest on a writer thread), a
L{TurnExecutor} at the end of each reactor turn or a L{ThreadedExecutor}
on a writer thread (or inline, for deterministic tests, by an
L{InlineExecutor}); L{meshroute.store.writers} makes the one C{[store]
writer} names.  How every executor runs the store's SQL in
transactions is L{meshroute.store.transactions}.  The store's SQL is
grouped by idea, one module each (listed in L{meshroute.store.sqlite}).
Its schema ships as package data in C{schema/}.

The store sits below the router and below the HA pair that replicates
it, and imports neither.  It learns of replication through an
interface it defines in its own terms: its executor hands each ended
transaction, as a L{meshroute.store.changes.ChangeBatch} of the
statements that ran, to an L{meshroute.interfaces.ICommitGate}, which
the active HA instance implements (an interface, rather than the HA
types imported, because what replicates the store is the caller's
business, and the capture of statements is the store's own).  The
voter records it keeps for every router's witness are the voting
rules' own records (L{meshroute.harules.quorum.VoterRecord}): pure data
from the package below it.
"""

from meshroute.store.accepting import DuplicateMessage
from meshroute.store.adaptive_executor import AdaptiveExecutor
from meshroute.store.database import SYNC_MODES, StoreError
from meshroute.store.rows import CLAIMED
from meshroute.store.inbox import MissingTransfer
from meshroute.store.inline_executor import InlineExecutor
from meshroute.store.set_aside import DEAD_LETTER_ADDRESS, DEAD_LETTER_REASON
from meshroute.store.sqlite import SQLiteStore
from meshroute.store.threaded_executor import ThreadedExecutor
from meshroute.store.transactions import ExecutorStopped
from meshroute.store.turn_executor import TurnExecutor

__all__ = [
    "AdaptiveExecutor",
    "CLAIMED",
    "DEAD_LETTER_ADDRESS",
    "DEAD_LETTER_REASON",
    "SYNC_MODES",
    "DuplicateMessage",
    "ExecutorStopped",
    "InlineExecutor",
    "MissingTransfer",
    "SQLiteStore",
    "StoreError",
    "ThreadedExecutor",
    "TurnExecutor",
]
