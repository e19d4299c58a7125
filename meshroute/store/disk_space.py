"""
Whether the disk the store is on has room for new messages: its free
space, checked every L{CHECK_INTERVAL_S}, against C{[store]
min-free-disk}.

A store whose disk fills up is wedged, not merely full: SQLite cannot
grow the database file, so the WAL checkpoint fails and the WAL cannot
be reused, and then every transaction fails, a consumer's
acknowledgement included.  The queues cannot be drained, each delivery
comes back redelivered, and nothing moves until an operator frees space.
So a router stops taking new messages while its disk has less than
C{min-free-disk} free: its clients' sends are refused with C{disk-full}
(L{meshroute.router.admission}), and its links hold what other routers
send, neither stored nor acknowledged, so that each peer stops at its
window (L{meshroute.router.peer_channel}).  What is left stays for what
drains the store: acknowledgements, the checkpoints, the event log.
This is what RabbitMQ's C{disk_free_limit} and Artemis's
C{max-disk-usage} do.

Most of what a busy store writes is its WAL: whole pages per commit, tens
of MB a second at a few thousand small commits, in a file that grows
until a checkpoint copies it into the database (which then grows by the
pages that were new) and the next write restarts it from its beginning.
A writer that is never idle checkpoints only once the WAL passes
L{WAL_MAX_BYTES}, so the WAL alone may take that much more of the disk
before the next reading.  So while the file system has less than
C{min-free-disk} plus that bound, the store is I{squeezed}: it checkpoints after every batch of work, and its
WAL stops growing (at a cost in throughput, only there); below
C{min-free-disk} itself sends are refused.
"""

import os
from typing import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from meshroute.said_once import SaidOnce
from meshroute.store.checkpoints import WAL_MAX_BYTES

log = Logger()

#: How often the free space is read (one C{statvfs}, a few µs).  Often,
#: because a store writes fast: at a few thousand small commits a second
#: its WAL grows by tens of MB a second (whole pages per commit) until the
#: next checkpoint, so C{min-free-disk} must hold what is written between
#: two readings as well as what drains the store.
CHECK_INTERVAL_S = 0.1

#: Of C{min-free-disk}, at least one part in this many must be free on the
#: file system itself, whatever the store's free pages: the WAL and the
#: event log write there.
FILE_SYSTEM_SHARE = 4


def free_bytes(path: str) -> int:
    """
    The bytes an unprivileged process may still write on the file system
    of C{path}.
    """
    found = os.statvfs(path)
    return found.f_bavail * found.f_frsize


def _size(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB"


class DiskSpace:
    """
    The free space of the disk of C{path} against C{min_free} bytes (0:
    no bound), read when made and then every L{CHECK_INTERVAL_S} while
    running.  What counts as free is what the file system has free plus
    C{reusable()}: the database file's free pages, the room the messages
    consumed left, which new rows take before the file grows (SQLite never
    gives them back to the file system by itself).  Without it, a queue
    drained after the disk became low would not make it roomy again.

    When the file system alone has less than C{min_free} +
    L{WAL_MAX_BYTES}, C{squeeze(True)} has the store checkpoint after every
    batch of work (C{squeeze(False)} above it).  Below C{min_free} (or
    with less than a L{FILE_SYSTEM_SHARE}th of it on the file system),
    L{low} refuses clients' sends and has the links hold what arrives,
    and C{room()} is called once it is not any more.

    @ivar read_free: how the free space of C{path} is read (L{free_bytes}).
    @ivar low: whether the disk had less than C{min_free} bytes free at
        the last reading.
    @ivar squeezed: whether the file system had less than C{min_free} +
        L{WAL_MAX_BYTES}.
    @ivar free: the bytes free at the last reading, the store's reusable
        ones included (None if it failed).
    """

    def __init__(self, path: str, min_free: int, clock: IReactorTime,
                 read_free: Callable[[str], int] = free_bytes,
                 reusable: Callable[[], int] = lambda: 0,
                 squeeze: Callable[[bool], None] = lambda squeezed: None,
                 room: Callable[[], None] = lambda: None) -> None:
        self.path = path
        self.min_free = min_free
        self.read_free = read_free
        self._reusable = reusable
        self._squeeze = squeeze
        self._room = room
        self._loop = LoopingCall(self.check)
        self._loop.clock = clock
        self.low = self.squeezed = False
        self.free: int | None = None
        self._unreadable = SaidOnce(log)
        self.check()

    def start(self) -> None:
        """
        Read the free space every L{CHECK_INTERVAL_S} from now on.
        """
        if self.min_free and not self._loop.running:
            self._loop.start(CHECK_INTERVAL_S, now=False)

    def stop(self) -> None:
        """
        Read no more (the router stops).
        """
        if self._loop.running:
            self._loop.stop()

    def check(self) -> None:
        """
        Read the free space now, squeeze or release the store, and say in
        the log when the disk becomes low and when it has room once more.
        A reading that fails leaves everything as it was (and is said once
        until one succeeds).
        """
        if not self.min_free:
            return
        try:
            on_disk = self.read_free(self.path)
        except OSError as e:
            self.free = None
            self._unreadable.trouble("cannot read the free space of {path}: {error}",
                                     path=self.path, error=e)
            return
        self._unreadable.over()
        free = self.free = on_disk + self._reusable()
        # The WAL and the event log grow into the file system, never into
        # the store's free pages.
        squeezed = on_disk < self.min_free + WAL_MAX_BYTES
        if squeezed != self.squeezed:
            self.squeezed = squeezed
            self._squeeze(squeezed)
        low = free < self.min_free or on_disk < self.min_free // FILE_SYSTEM_SHARE
        if low and not self.low:
            log.warn("the disk of {path} has {free} free, under [store] min-free-disk "
                     "({limit}): new messages are refused (disk-full) until it has more",
                     path=self.path, free=_size(free), limit=_size(self.min_free))
        elif self.low and not low:
            log.info("the disk of {path} has {free} free again ([store] min-free-disk "
                     "{limit}): new messages are taken", path=self.path, free=_size(free),
                     limit=_size(self.min_free))
        was_low, self.low = self.low, low
        if was_low and not low:
            self._room()

    def describe(self) -> str:
        """
        Why a send is refused while the disk is low: for the client.
        """
        free = "unknown" if self.free is None else _size(self.free)
        return (f"the router's disk has {free} free, under its min-free-disk "
                f"({_size(self.min_free)}): no new message is taken until it has more")
