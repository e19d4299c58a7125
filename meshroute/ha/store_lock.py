"""
The lock file of a shared-store pair, C{DATA-DIR/shared-store.lock}
(L{meshroute.harules.shared_store} gives its layout and rules).

Its locks are Linux open-file-description locks (C{F_OFD_SETLK}): byte
ranges like POSIX C{fcntl} locks, so they work on a shared filesystem
that supports POSIX locks (NFSv4), but owned by the open file rather
than the process, so that two instances in one process (colocated, or a
test) exclude each other too.  The kernel releases them when the
process dies: a SIGKILLed live loses the store at once; a SIGSTOPped one
keeps it.

Every call is a system call or two on a local file: the instance makes
them on the reactor thread (a poll, a heartbeat) and the store's writer
thread makes one (L{StoreLock.held}) before each commit batch.
"""

import fcntl
import os
import struct

from meshroute.harules.shared_store import (
    FAILBACK_LOCK_OFFSET, LIVE_LOCK_OFFSET, LOCK_FILE, RECORD_SIZE, LockRecord)

#: C{struct flock} on Linux x86-64 and arm64: type, whence, start, len, pid.
_FLOCK = "hhqqi4x"


def _flock(kind: int, offset: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0)


class StoreLockLost(RuntimeError):
    """
    A commit batch found that this instance no longer holds the live lock:
    nothing in it is written.
    """


class StoreLock:
    """
    The lock file of the shared data dir C{data_dir}, opened (created if
    new) by this instance.
    """

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, LOCK_FILE)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._inode = os.fstat(self._fd).st_ino
        self.live = False
        self.requesting = False

    # -- the locks ------------------------------------------------------------

    def _try(self, offset: int) -> bool:
        try:
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_WRLCK, offset))
        except (BlockingIOError, PermissionError):
            return False
        return True

    def _release(self, offset: int) -> None:
        fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_UNLCK, offset))

    def _held_elsewhere(self, offset: int) -> bool:
        answer = fcntl.fcntl(self._fd, fcntl.F_OFD_GETLK, _flock(fcntl.F_WRLCK, offset))
        return struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK

    def try_live(self) -> bool:
        """
        Take the live lock if it is free; whether this instance holds it.
        """
        if not self.live:
            self.live = self._try(LIVE_LOCK_OFFSET)
        return self.live

    def release_live(self) -> None:
        if self.live:
            self.live = False
            self._release(LIVE_LOCK_OFFSET)

    def live_held_elsewhere(self) -> bool:
        return self._held_elsewhere(LIVE_LOCK_OFFSET)

    def request_failback(self) -> bool:
        """
        Hold the failback request (a waiting primary does); whether it holds it.
        """
        if not self.requesting:
            self.requesting = self._try(FAILBACK_LOCK_OFFSET)
        return self.requesting

    def withdraw_failback(self) -> None:
        if self.requesting:
            self.requesting = False
            self._release(FAILBACK_LOCK_OFFSET)

    def failback_requested(self) -> bool:
        """
        Whether another instance holds a failback request now.
        """
        return self._held_elsewhere(FAILBACK_LOCK_OFFSET)

    def held(self) -> None:
        """
        Before a commit batch: make sure this instance still holds the live
        lock on the file at the lock's path (not one deleted or replaced
        under it, whose lock excludes no one).

        @raise StoreLockLost: when it does not.
        """
        if not self.live:
            raise StoreLockLost(f"{self.path}: this instance released the live lock")
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            inode = None
        if inode != self._inode:
            raise StoreLockLost(f"{self.path} was removed or replaced under the live instance")

    # -- the record -------------------------------------------------------------

    def read(self) -> LockRecord:
        return LockRecord.decode(os.pread(self._fd, RECORD_SIZE, 0))

    def write(self, record: LockRecord, durable: bool = True) -> None:
        """
        Write C{record} (only the live lock's holder does); C{durable}
        fsyncs it (an activation, a pause), a heartbeat need not be.
        """
        os.pwrite(self._fd, record.encode(), 0)
        if durable:
            os.fsync(self._fd)

    def close(self) -> None:
        """
        Close the file, which releases whatever locks this instance holds.
        """
        self.live = self.requesting = False
        os.close(self._fd)
