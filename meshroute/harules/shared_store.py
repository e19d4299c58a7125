"""
The rules of a shared-store pair, as pure logic (docs/ha.md, "Shared
store").

Both instances of a shared-store pair name one data dir.  Who serves is
decided by a lock file there, C{shared-store.lock}, not by votes: the
instance holding its live lock serves from C{store.db}, the other waits.
The file holds one L{LockRecord} (what the holder last said) and two
one-byte lock ranges: the live lock, and the failback request, which a
primary waiting for the store holds while it waits (so a request dies
with its process, and never outlives the primary that made it).

The rules, in the order an instance applies them:

 1. An instance serves only while it holds the live lock; it takes the
    lock before it opens C{store.db}, checks it before every commit
    batch, and releases it only after C{store.db} is closed.  A process
    that dies loses its locks with it (the kernel releases them).
 2. A primary takes a free live lock whatever the record says: it is
    the preferred instance, and a store paused by a clean stop waits for
    it (L{may_take}).
 3. A backup takes a free live lock only when the record says the
    holder did not stop cleanly without handing over (L{PAUSED}: the
    operator stopped the live with C{failover-on-shutdown = false}) and
    no live failback request stands (the primary waits to take it).
 4. Each activation serves in a new epoch: one above the newest the
    record or the store itself holds (L{next_epoch}), written into the
    record (fsynced) before the router starts, so that the mesh
    supersedes the links of every earlier holder and clients refuse it.
 5. An active backup with C{allow-failback} hands the store back when a
    live failback request stands (L{hands_back}): it stops its router,
    which finishes its in-flight commits and closes the store, then
    releases the live lock.
 6. A waiting instance that sees the live lock held and the record's
    heartbeat unchanged for C{lease-timeout} reports the live
    unresponsive (L{HeartbeatWatch}); it does not take over, for the
    lock still stands (a frozen live may wake and write again).
"""

import struct
from dataclasses import dataclass

from meshroute.harules.settings import BACKUP, PRIMARY

#: The lock file in the shared data dir.
LOCK_FILE = "shared-store.lock"

#: What the record says of the store (its C{state}).
NOT_STARTED = "N"
#: A holder serves, or served and died (its lock is gone then).
LIVE = "L"
#: The holder stopped cleanly without handing over (C{failover-on-shutdown
#: = false}): a backup does not take it over (rule 3).
PAUSED = "P"
STATES = (NOT_STARTED, LIVE, PAUSED)

_OWNERS = {PRIMARY: "p", BACKUP: "b", "": "-"}
_ROLES = {code: role for role, code in _OWNERS.items()}

#: The record: magic, version, state, owner, padding, epoch, heartbeat.
_RECORD = struct.Struct(">4sBcc1xQQ")
_MAGIC = b"MRSS"
_VERSION = 1
RECORD_SIZE = _RECORD.size
#: The byte offsets of the two lock ranges (one byte each), after the record.
LIVE_LOCK_OFFSET = 64
FAILBACK_LOCK_OFFSET = 65


class BadLockRecord(ValueError):
    """
    The lock file's record is not one this meshroute wrote.
    """


@dataclass(frozen=True)
class LockRecord:
    """
    What the holder of the live lock last wrote.

    @ivar state: L{NOT_STARTED}, L{LIVE} or L{PAUSED}.
    @ivar owner: the role of the instance that wrote it (C{""} before any).
    @ivar epoch: the epoch of the newest activation.
    @ivar heartbeat: a counter the live raises every C{heartbeat-interval}.
    """

    state: str = NOT_STARTED
    owner: str = ""
    epoch: int = 0
    heartbeat: int = 0

    def encode(self) -> bytes:
        return _RECORD.pack(_MAGIC, _VERSION, self.state.encode(), _OWNERS[self.owner].encode(),
                            self.epoch, self.heartbeat)

    @classmethod
    def decode(cls, data: bytes) -> "LockRecord":
        """
        The record in C{data}, the file's first bytes; an empty file (a new
        one) is L{NOT_STARTED}.

        @raise BadLockRecord: for anything else that is not a record.
        """
        if not data.strip(b"\0"):
            return cls()
        if len(data) < RECORD_SIZE:
            raise BadLockRecord(f"{len(data)} bytes, a record has {RECORD_SIZE}")
        magic, version, state, owner, epoch, heartbeat = _RECORD.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
            raise BadLockRecord(f"not a meshroute shared-store record (magic {magic!r}, "
                                f"version {version})")
        state, owner = state.decode("latin-1"), owner.decode("latin-1")
        if state not in STATES or owner not in _ROLES:
            raise BadLockRecord(f"unknown state {state!r} or owner {owner!r}")
        return cls(state, _ROLES[owner], epoch, heartbeat)


def may_take(role: str, record: LockRecord, failback_requested: bool) -> bool:
    """
    Whether an instance of C{role} that finds the live lock free may take
    the store (rules 2 and 3).
    """
    if role == PRIMARY:
        return True
    return record.state != PAUSED and not failback_requested


def next_epoch(record: LockRecord, stored: int) -> int:
    """
    The epoch of an activation (rule 4): above the record's and above
    C{stored}, the newest epoch start in C{store.db} (which outlives a
    lost lock file).
    """
    return max(record.epoch, stored) + 1


def hands_back(role: str, allow_failback: bool, failback_requested: bool) -> bool:
    """
    Whether the serving instance hands the store back now (rule 5).
    """
    return role == BACKUP and allow_failback and failback_requested


class HeartbeatWatch:
    """
    Rule 6: whether the live, which holds the lock, still writes its
    heartbeat.  Fed every poll with the record's heartbeat and the time.

    @param lease_timeout: seconds without a new heartbeat before the live
        is unresponsive.
    """

    def __init__(self, lease_timeout: float) -> None:
        self._lease_timeout = lease_timeout
        self._last: int | None = None
        self._changed_at = 0.0

    def saw(self, heartbeat: int, now: float) -> None:
        if heartbeat != self._last:
            self._last = heartbeat
            self._changed_at = now

    @property
    def changed_at(self) -> float:
        """
        When the heartbeat last changed (the clock's seconds).
        """
        return self._changed_at

    def forget(self) -> None:
        """
        The lock was free, or this instance served: start afresh.
        """
        self._last = None

    def unresponsive(self, now: float) -> bool:
        return self._last is not None and now - self._changed_at >= self._lease_timeout

    def silent_for(self, now: float) -> float | None:
        """
        Seconds since the heartbeat last changed; None when not watching.
        """
        return None if self._last is None else now - self._changed_at


#: The API states of a shared-store instance (C{GET /api/v1/ha}).
STARTING = "starting"
#: The live lock is held by the other instance (or the store is paused):
#: polling every C{lock-poll-interval}.
BACKUP_WAITING = "backup-waiting"
#: Waiting, and the live that holds the lock wrote no heartbeat for
#: C{lease-timeout} (rule 6): frozen or its disk hangs; no failover.
LIVE_UNRESPONSIVE = "live-unresponsive"
#: Holding the live lock and serving.
ACTIVE = "active"
#: Serving no more: finishing in-flight commits and closing the store
#: before releasing the lock (failback, rule 5, or a lost lock).
HANDING_BACK = "handing-back"
API_STATES = (STARTING, BACKUP_WAITING, LIVE_UNRESPONSIVE, ACTIVE, HANDING_BACK)
