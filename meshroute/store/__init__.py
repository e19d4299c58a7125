"""
The durable message store: where a router keeps its queues and the
messages in flight through it.

L{SQLiteStore} implements L{meshroute.interfaces.IMessageStore} on SQLite
in WAL mode, written off the reactor thread with group commit by a
L{TurnExecutor} at the end of each reactor turn or a L{ThreadedExecutor}
on a writer thread (or inline, for deterministic tests, by an
L{InlineExecutor}).  Its schema ships as package data in C{schema/}.
"""

from meshroute.store.executor import (
    ExecutorStopped,
    InlineExecutor,
    ThreadedExecutor,
    TurnExecutor,
)
from meshroute.store.sqlite import (
    DEAD_LETTER_ADDRESS,
    DEAD_LETTER_REASON,
    SYNC_MODES,
    DuplicateMessage,
    MissingTransfer,
    SQLiteStore,
    StoreError,
)

__all__ = [
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
