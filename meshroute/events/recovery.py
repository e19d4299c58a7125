"""
Putting an events directory in order before a router writes to it: the
files a killed router left are closed, and the single file of a router
from before rotation is moved in.
"""

import json
import os

from twisted.logger import Logger

from meshroute.durable_files import move_durably, sync_directory
from meshroute.events.closing import close_file
from meshroute.events.directory import (
    CLOSED_NAME,
    CURRENT_FILE,
    LEGACY_FILE,
    OPEN_NAME,
    OPEN_SUFFIX,
    file_name,
    start_stamp,
)

_log = Logger(namespace="meshroute.events")


def recover(directory: str, data_dir: str) -> tuple[int, str]:
    """
    Put C{directory} in order before a router writes to it: close the
    files a killed router left (those renamed C{.open} and not closed yet,
    or written under such a name by a router from before L{CURRENT_FILE},
    then its L{CURRENT_FILE}), ending a truncated last line, so the next
    reader sees a malformed line instead of two records run together, and
    deleting empty ones; and move an C{events.jsonl} of a router from
    before rotation in as a closed file.

    A L{CURRENT_FILE} left behind is named from what it and the directory
    hold: C{START} from its first record's time (the file's modification
    time if that line cannot be read), never earlier than the latest
    C{START} there, and the next C{SEQ}.  That is the C{SEQ} it was given
    (every file before it is named there) unless retention had deleted
    the newest closed files, and then still above every C{SEQ} left, so
    the names sort in writing order, which is all they promise.  A small
    file holding the name, written before each new L{CURRENT_FILE}
    instead, would cost every rotation a write and an fsync to be sure of,
    have crash windows of its own (written, but the file not created yet;
    torn) that would need this fallback anyway, and be one more file for
    every reader and glob of the directory to skip.

    @return: the next file's sequence number, and the latest start time
        of a file's name.
    """
    seq, last_start = 0, ""
    found = []
    for name in sorted(os.listdir(directory)):
        match = CLOSED_NAME.fullmatch(name) or OPEN_NAME.fullmatch(name)
        if match:
            seq = max(seq, int(match[2]) + 1)
            last_start = max(last_start, match[1])
            if name.endswith(OPEN_SUFFIX):
                found.append(os.path.join(directory, name))
    for path in found:
        if _left_whole(path):
            close_file(path)
            _log.info("Event log: closed {name}, which the last run left open",
                      name=os.path.basename(path))
    current = os.path.join(directory, CURRENT_FILE)
    # Its modification time before a line end is added: its last record's.
    start = max(_first_time(current), last_start) if os.path.isfile(current) else None
    if start is not None and _left_whole(current):
        name = file_name(start, seq)
        move_durably(current, os.path.join(directory, name))
        _log.info("Event log: closed {current} as {name}, which the last run left being "
                  "written", current=CURRENT_FILE, name=name)
        seq += 1
        last_start = start
    legacy = os.path.join(data_dir, LEGACY_FILE)
    if os.path.isfile(legacy):
        _end_last_line(legacy)
        start = _first_time(legacy)
        name = file_name(start, seq)
        move_durably(legacy, os.path.join(directory, name))
        sync_directory(data_dir)
        _log.info("Event log: moved {legacy}, the single event file of an older meshroute, "
                  "to {name}", legacy=legacy, name=os.path.join(directory, name))
        seq += 1
        last_start = max(last_start, start)
    return seq, last_start


def _left_whole(path: str) -> bool:
    """
    Make a file a killed router left being written whole: end a truncated
    last line (L{_end_last_line}), or delete it if it is empty.

    @return: whether it is still there, to be closed.
    """
    if os.path.getsize(path) == 0:
        os.remove(path)
        return False
    _end_last_line(path)
    return True


def _first_time(path: str) -> str:
    """
    The start time for the name of a file that has none (an old
    C{events.jsonl}, a L{CURRENT_FILE} a killed router left): its first
    record's, or the file's modification time when that cannot be read.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    try:
        return start_stamp(float(json.loads(first)["time"]))
    except (ValueError, KeyError, TypeError, OverflowError, OSError):
        return start_stamp(os.path.getmtime(path))


def _end_last_line(path: str) -> None:
    """
    End a truncated last line of the file at C{path}, and write it to disk.
    """
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.flush()
        os.fsync(f.fileno())
