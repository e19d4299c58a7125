"""
Closing an event file (it is written to disk, then renamed to its closed
name, durably), and the closed files a log keeps: the oldest beyond
C{retain} are deleted.
"""

import os
from collections import deque

from twisted.logger import Logger

from meshroute.durable_files import move_durably
from meshroute.events.directory import OPEN_SUFFIX, closed_names
from meshroute.events.settings import RetainBytes

_log = Logger(namespace="meshroute.events")


class ClosedFiles:
    """
    The closed files of an events directory, oldest first, and the work of
    closing one and applying C{retain}: done by one thread at a time (the
    closer's, or the reactor's), in the order the files were written.
    """

    def __init__(self, directory: str, retain: int | None) -> None:
        self._directory = directory
        self._retain = retain
        self._files = deque((name, os.path.getsize(os.path.join(directory, name)))
                            for name in closed_names(directory))
        self._bytes = sum(size for _, size in self._files)

    def close(self, f, path: str, size: int) -> None:
        """
        Close the open file C{f} at C{path} (C{size} bytes, flushed):
        fsync, close, rename without C{.open}, sync the directory; then
        apply C{retain}.  An error is logged: the file stays C{.open}, to
        be closed at the next start.
        """
        try:
            os.fsync(f.fileno())
            f.close()
            close_file(path)
        except OSError:
            _log.failure("Event log: cannot close {path}", path=path)
            return
        self._files.append((os.path.basename(path)[:-len(OPEN_SUFFIX)], size))
        self._bytes += size
        self.apply_retention()

    def apply_retention(self) -> None:
        """
        Delete the oldest closed files beyond C{retain}, logging each.
        """
        retain = self._retain
        if retain is None:
            return
        by_bytes = isinstance(retain, RetainBytes)
        why = f"retain = {int(retain)} bytes" if by_bytes else f"retain = {retain} files"
        while self._files and (self._bytes if by_bytes else len(self._files)) > retain:
            name, size = self._files.popleft()
            self._bytes -= size
            try:
                os.remove(os.path.join(self._directory, name))
            except FileNotFoundError:
                continue
            except OSError:
                _log.failure("Event log: cannot delete {name} ({why})", name=name, why=why)
                continue
            _log.info("Event log: deleted {name} ({size} bytes), the oldest closed file "
                      "beyond {why}", name=name, size=size, why=why)


def close_file(path: str) -> None:
    """
    Make the event file at C{path} (a C{.open} one, written to disk) a
    closed one, by a durable rename (L{move_durably}).
    """
    move_durably(path, path[:-len(OPEN_SUFFIX)])
