"""
The files of an event log in C{DATA-DIR/events/}: what each is called,
which are closed, and the order they were written in.
"""

import os
import re
import time as _time

#: The directory of a data dir that holds the event files.
EVENTS_DIR = "events"
#: What a router before rotation wrote instead: one file, moved into
#: L{EVENTS_DIR} as its first closed file at the first start
#: (L{meshroute.events.recovery.recover}).
LEGACY_FILE = "events.jsonl"
#: The file being written: a path that never changes, for the tools that
#: follow a log by its path.  Its closed name is decided when it is opened
#: (L{meshroute.events.writer.EventLog}), or from its content when a killed
#: router left it (L{meshroute.events.recovery.recover}).
CURRENT_FILE = "current.jsonl"
#: The suffix of a file renamed from L{CURRENT_FILE} and not closed yet (a
#: router before L{CURRENT_FILE} wrote its current file under such a name).
OPEN_SUFFIX = ".open"
#: C{events-START-SEQ.jsonl}: START is the UTC second the file was opened
#: (C{YYYYMMDDTHHMMSSZ}), SEQ the router's file counter, which only grows
#: (across restarts too), so sorting the names sorts the files in the
#: order they were written even when two were opened in the same second.
CLOSED_NAME = re.compile(r"events-(\d{8}T\d{6}Z)-(\d{6,})\.jsonl")
OPEN_NAME = re.compile(CLOSED_NAME.pattern + re.escape(OPEN_SUFFIX))
_START_FORMAT = "%Y%m%dT%H%M%SZ"


def events_dir(data_dir: str) -> str:
    """
    The directory of C{data_dir} that holds its event files.
    """
    return os.path.join(data_dir, EVENTS_DIR)


def file_name(start: str, seq: int) -> str:
    """
    The name of a closed event file opened at C{start} (C{YYYYMMDDTHHMMSSZ}).
    """
    return f"events-{start}-{seq:06d}.jsonl"


def start_stamp(seconds: float) -> str:
    """
    The START of a file name for C{seconds} (epoch): its UTC second.
    """
    return _time.strftime(_START_FORMAT, _time.gmtime(seconds))


def closed_names(directory: str) -> list[str]:
    """
    The closed event files in C{directory}, oldest first.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if CLOSED_NAME.fullmatch(name))


def event_files(data_dir: str) -> list[str]:
    """
    The paths of a data dir's event files in the order they were written,
    from one listing of its C{events/}: an old C{events.jsonl} not yet
    moved (a data dir of a router from before rotation that has not
    started since), the closed files, those renamed to be closed and not
    closed yet (C{.open}; after a crash, those left so), then the file
    being written, L{CURRENT_FILE}.
    """
    directory = events_dir(data_dir)
    legacy = os.path.join(data_dir, LEGACY_FILE)
    paths = [legacy] if os.path.isfile(legacy) else []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        names = []
    paths.extend(os.path.join(directory, n) for n in names if CLOSED_NAME.fullmatch(n))
    paths.extend(os.path.join(directory, n) for n in names if OPEN_NAME.fullmatch(n))
    if CURRENT_FILE in names:
        paths.append(os.path.join(directory, CURRENT_FILE))
    return paths

