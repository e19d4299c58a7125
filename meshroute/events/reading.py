"""
Reading an event log while it is written and rotated: every record once,
in order, whether it is in a closed file, one being closed, or the file
being written.
"""

import json
import os
from collections.abc import Container, Iterator

from meshroute.events.directory import CURRENT_FILE, OPEN_SUFFIX, event_files, events_dir


def _open_event_file(path: str, mode: str = "r"):
    """
    Open an event file for reading, following a C{.open} file that was
    closed (renamed) since it was listed; None if it is gone (deleted by
    retention, or a L{CURRENT_FILE} renamed and not replaced yet).
    """
    candidates = [path]
    if path.endswith(OPEN_SUFFIX):
        candidates.append(path[:-len(OPEN_SUFFIX)])
    for candidate in candidates:
        try:
            return open(candidate, mode, encoding=None if "b" in mode else "utf-8")
        except FileNotFoundError:
            continue
    return None


def _opened(data_dir: str, mode: str, done: Container[str] = frozenset()) -> list[tuple]:
    """
    A data dir's event files, opened for reading in the order they were
    written, as C{(key, file)} pairs: C{key} is the path the file has once
    closed, or None for the file being written (its closed name is not
    known yet).  Files whose key is in C{done} are left out.

    The file being written is opened before the directory is listed: opened
    after, a rotation in between would put a new L{CURRENT_FILE} in the
    place of the one listed, and the records of the one listed, renamed,
    would be missed.  Renamed after it was opened, it is listed too, and
    recognised there as the file already open (the same inode, which no
    other file can have while it is open): it is read once, in its place.
    """
    current_path = os.path.join(events_dir(data_dir), CURRENT_FILE)
    current = _open_event_file(current_path, mode)
    opened = []
    for path in event_files(data_dir):
        key = path[:-len(OPEN_SUFFIX)] if path.endswith(OPEN_SUFFIX) else path
        if path == current_path or key in done:
            continue
        f = _open_event_file(path, mode)
        if f is None:
            continue
        if current is not None and os.path.sameopenfile(f.fileno(), current.fileno()):
            current.close()
            current = None
        opened.append((key, f))
    if current is not None:
        opened.append((None, current))
    return opened


def _records(f) -> Iterator[dict]:
    """
    The well-formed records of an open event file: a malformed line, or a
    last line still being written, is skipped.
    """
    for line in f:
        if not line.endswith("\n"):
            return
        try:
            yield json.loads(line)
        except ValueError:
            continue


def read_events(data_dir: str) -> list[dict]:
    """
    Every well-formed record of a data dir's event log, in order, the file
    being written included (as far as it is written), each once even if
    the log rotates meanwhile (L{_opened}).  For tests and tools; the audit
    has its own reader with error accounting.
    """
    records: list[dict] = []
    for _, f in _opened(data_dir, "r"):
        with f:
            records.extend(_records(f))
    return records


class EventFollower:
    """
    Reads the records a data dir's event log gained since the last call,
    across rotations: a tail that knows which files it has read.  Like
    C{tail -F} it keeps the file being written open between calls: that is
    how it knows the file again once it is renamed (L{_opened}), where a
    name would not say it and an inode number alone might be another
    file's by then.
    """

    def __init__(self, data_dir: str, from_end: bool = False) -> None:
        """
        @param from_end: skip what the log holds now: the first call
            returns only records written after this.
        """
        self._data_dir = data_dir
        #: Closed paths of the files read to the end.
        self._finished: set[str] = set()
        #: How far the listed files not yet finished were read, by closed path.
        self._offsets: dict[str, int] = {}
        #: The file being written at the last read, open, and how far it was read.
        self._current: tuple | None = None
        if from_end:
            self._read(skip=True)

    def _read(self, skip: bool = False) -> bytes:
        """
        Every complete line written since the last read, and move past it
        (without reading it, if C{skip}).
        """
        data = []
        held, self._current = self._current, None
        for key, f in _opened(self._data_dir, "rb", self._finished):
            if held is not None and os.path.sameopenfile(f.fileno(), held[0].fileno()):
                offset = held[1]
            else:
                offset = self._offsets.pop(key, 0)
            if skip:
                unread = f.seek(0, os.SEEK_END) - offset
                complete = unread
            else:
                f.seek(offset)
                new = f.read()
                unread = len(new)
                complete = new.rfind(b"\n") + 1
                data.append(new[:complete])
            if key is None:
                self._current = (f, offset + complete)
                continue
            closed = not f.name.endswith(OPEN_SUFFIX)
            f.close()
            if closed and complete == unread:
                self._finished.add(key)
            else:
                self._offsets[key] = offset + complete
        if held is not None:
            held[0].close()
        return b"".join(data)

    def new_events(self) -> list[dict]:
        """
        The well-formed records written since the last call, in order.
        """
        records = []
        for line in self._read().decode("utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records

    def close(self) -> None:
        """
        Let go of the file being written.
        """
        if self._current is not None:
            self._current[0].close()
            self._current = None
