"""
The router's event log: files in C{DATA-DIR/events/}, one JSON object per
line, appended as things happen.

The router writes one file at a time, always at the same path,
C{current.jsonl}, so that whoever follows the log by its path (C{tail -F},
a log shipper) follows it across rotations.  When the file reaches
C{max-file-size} or C{max-age} it is renamed C{events-START-SEQ.jsonl.open}
and the next records start a new C{current.jsonl}; the closer then fsyncs
it and renames it C{events-START-SEQ.jsonl}.  A closed file is never
written again, so readers that must not see a file being written (the
streaming audit) read only C{events-*.jsonl}.  L{event_files} lists them
in order and L{read_events} reads them; docs/events.md describes the
files.

Every record has C{time} (epoch seconds, float, from the router's clock),
C{router} and C{event}; the rest of its fields depend on the event and are
listed in docs/events.md.  The audit pipeline reads these files from many
routers, so event names and fields are a stable contract: add fields,
never rename them.
"""

import json
import os
import re
from bisect import bisect_right
import time as _time
from collections import Counter, deque
from collections.abc import Container, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from operator import add
from json.encoder import c_make_encoder, encode_basestring_ascii
from math import isfinite

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

LINK_STAGE = "link.stage"
LINK_REJECTED = "link.rejected"
LINK_CLOSED = "link.closed"
LINK_INCARNATION = "link.incarnation"
CONNECTOR_EXHAUSTED = "connector.exhausted"
MESSAGE_ACCEPTED = "message.accepted"
MESSAGE_FORWARDED = "message.forwarded"
MESSAGE_ENQUEUED = "message.enqueued"
MESSAGE_CONSUMED = "message.consumed"
MESSAGE_DUPLICATE = "message.duplicate"
MESSAGE_DEAD_LETTERED = "message.dead-lettered"
MESSAGE_DROPPED = "message.dropped"
MESSAGE_EXPIRED = "message.expired"
SESSION_OPENED = "session.opened"
SESSION_DISCONNECTED = "session.disconnected"
SESSION_REATTACHED = "session.reattached"
SESSION_RECREATED = "session.recreated"
SESSION_EXPIRED = "session.expired"
SESSION_CLOSED = "session.closed"
SECURITY_AUTHENTICATED = "security.authenticated"
SECURITY_DENIED = "security.denied"
ROUTER_STARTED = "router.started"
ROUTER_STOPPED = "router.stopped"
HA_VOTE = "ha.vote"
HA_HEARTBEAT_REFUSED = "ha.heartbeat-refused"
# An HA instance's own events (docs/events.md, "HA instance events").
HA_STATE = "ha.state"
HA_EPOCH = "ha.epoch"
HA_FENCED = "ha.fenced"
HA_FAILOVER = "ha.failover"
HA_REPLICATION = "ha.replication"
HA_FORCE_ACTIVATE = "ha.force-activate"

#: The events counted by reason too (L{EventLog.reasons}): their reasons
#: are codes from a fixed set, so the counts stay few.
COUNTED_BY_REASON = frozenset({LINK_CLOSED, MESSAGE_DEAD_LETTERED, MESSAGE_DROPPED})


#: The compact encoder every record is byte-compatible with (what
#: L{_encoded} falls back to for values it does not encode itself):
#: C{json.JSONEncoder(separators=(",", ":")).encode}, whose C encoder is
#: made once here rather than for every record (a third of a record's
#: cost).  Records are made by this code, so the check for circular
#: references that costs is left out.
_C_ENCODER = c_make_encoder(None, json.JSONEncoder().default, encode_basestring_ascii, None,
                            ":", ",", False, False, True)


def _ENCODE(o) -> str:  # noqa: N802 (the name it had as a bound method)
    return "".join(_C_ENCODER(o, 0))


_STRING = encode_basestring_ascii
_SCALARS = {
    str: _STRING,
    int: int.__repr__,
    bool: {True: "true", False: "false"}.__getitem__,
    type(None): lambda v: "null",
}
#: The fields every record starts with; a record naming one of them again
#: is encoded as a dict, where the later value takes the first one's place.
_HEAD = ("time", "router", "event")


def _value(v) -> str:
    """
    C{v} as L{_ENCODE} writes it, without building an encoder per record.
    """
    scalar = _SCALARS.get(type(v))
    if scalar is not None:
        return scalar(v)
    if type(v) is float and v - v == 0:  # finite: JSON's float is float's repr
        return float.__repr__(v)
    return _ENCODE(v)


def _keys(names: tuple) -> list[str] | None:
    """
    The JSON keys of a record's fields C{names} after the head (None if
    one of them repeats a head field or another: such a record is written
    as a dict, where the later value takes the first one's place).
    """
    if set(names) & set(_HEAD) or len(set(names)) != len(names):
        return None
    return [_STRING(name) for name in names]


def _column(values: tuple) -> tuple[str | None, list | None]:
    """
    One field of a batch of records: C{(text, None)} when every record
    has the same value of a scalar type (C{text} as L{_value} writes it),
    else C{(None, texts)}, one per record as L{_value} writes it.  A
    column of one scalar type is written by one C-level map over its
    encoder, not by a Python call per value.
    """
    first = values[0]
    kind = type(first)
    if kind is str:
        # Equal to a string, a value is one (or one written the same).
        if values.count(first) == len(values):
            return _STRING(first), None
        try:
            return None, list(map(_STRING, values))
        except TypeError:  # not all strings
            return None, list(map(_value, values))
    if len(set(map(type, values))) != 1:
        # Mixed, and maybe equal across types (1 and True).
        return None, list(map(_value, values))
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        if values.count(first) == len(values):
            return scalar(first), None
        return None, list(map(scalar, values))
    if kind is float and all(map(isfinite, values)):
        # Few distinct times (a batch's messages share theirs): each
        # written once.  Not with a zero, which -0.0 would equal.
        distinct = set(values)
        if len(distinct) * 4 <= len(values) and 0.0 not in distinct:
            texts = dict(zip(distinct, map(float.__repr__, distinct)))
            if len(texts) == 1:
                return texts.popitem()[1], None
            return None, list(map(texts.__getitem__, values))
        return None, list(map(float.__repr__, values))
    return None, list(map(_value, values))


def _encoded(time: float, router: str, event: str, names: tuple, rows) -> str:
    """
    The records of C{event} at C{time} with fields C{names} and a tuple of
    values per record in C{rows}, one per line (no line end after the
    last), each exactly as L{_ENCODE} would write the dict C{{time,
    router, event, **fields}}.  A record's text between the fields that
    differ from record to record (the head, keys, and the values every
    record shares) is made once; the records are joined from it and the
    columns of values (L{_column}) in one C-level pass.
    """
    keys = _keys(names)
    if keys is None:
        head = {"time": time, "router": router, "event": event}
        return "\n".join([_ENCODE({**head, **dict(zip(names, row))}) for row in rows])
    if not rows:
        return ""
    # Text, then a column, then text, ..., then text: a record.
    texts: list[str] = []
    columns: list[list[str]] = []
    text = f'{{"time":{_value(time)},"router":{_value(router)},"event":{_value(event)}'
    for key, values in zip(keys, zip(*rows)):
        text += f",{key}:"
        shared, column = _column(values)
        if column is None:
            text += shared
        else:
            texts.append(text)
            columns.append(column)
            text = ""
    texts.append(text + "}")
    if not columns:
        return "\n".join([texts[0]] * len(rows))
    # Each record after the first starts on a new line.
    parts = [chain((texts[0],), repeat("\n" + texts[0]))]
    for column, text in zip(columns, texts[1:]):
        parts += [column, repeat(text)]
    return "".join(chain.from_iterable(zip(*parts)))


#: The directory of a data dir that holds the event files.
EVENTS_DIR = "events"
#: What a router before rotation wrote instead: one file, moved into
#: L{EVENTS_DIR} as its first closed file at the first start (L{EventLog}).
LEGACY_FILE = "events.jsonl"
#: The file being written: a path that never changes, for the tools that
#: follow a log by its path.  Its closed name is decided when it is opened
#: (L{EventLog}), or from its content when a killed router left it
#: (L{_recover}).
CURRENT_FILE = "current.jsonl"
#: The suffix of a file renamed from L{CURRENT_FILE} and not closed yet (a
#: router before L{CURRENT_FILE} wrote its current file under such a name).
OPEN_SUFFIX = ".open"
#: C{events-START-SEQ.jsonl}: START is the UTC second the file was opened
#: (C{YYYYMMDDTHHMMSSZ}), SEQ the router's file counter, which only grows
#: (across restarts too), so sorting the names sorts the files in the
#: order they were written even when two were opened in the same second.
_NAME = re.compile(r"events-(\d{8}T\d{6}Z)-(\d{6,})\.jsonl")
_OPEN_NAME = re.compile(_NAME.pattern + re.escape(OPEN_SUFFIX))
_START_FORMAT = "%Y%m%dT%H%M%SZ"

MiB = 1024 * 1024
#: Files handed to the closer thread and not closed yet, at most: past it
#: the writer waits for the oldest, so a disk slower than the events
#: holds up the router instead of its open files piling up.
MAX_CLOSING = 16

_log = Logger(namespace="meshroute.events")


class RetainBytes(int):
    """
    A C{retain} given as a size: the closed files kept may total this many
    bytes.  (A plain C{int} C{retain} counts files.)
    """


@dataclass(frozen=True)
class RotationSettings:
    """
    C{[events]}: when the router closes its event file and starts the next
    one, and which closed files it keeps.

    @ivar max_file_size: bytes; the file is closed at the first record
        boundary that would take it past this.  A record longer than it
        is written alone to a file.
    @ivar max_age_ms: a file is closed this long after it was opened, by a
        timer, so that readers of closed files see events within it; None:
        only the size closes files.
    @ivar retain: closed files kept: a number of files (C{int}), or their
        total size (L{RetainBytes}); the oldest beyond it are deleted.
        None keeps every file.
    """

    max_file_size: int = 64 * MiB
    max_age_ms: int | None = None
    retain: int | None = None


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


def _start_stamp(seconds: float) -> str:
    return _time.strftime(_START_FORMAT, _time.gmtime(seconds))


def _closed_names(directory: str) -> list[str]:
    """
    The closed event files in C{directory}, oldest first.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if _NAME.fullmatch(name))


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
    paths.extend(os.path.join(directory, n) for n in names if _NAME.fullmatch(n))
    paths.extend(os.path.join(directory, n) for n in names if _OPEN_NAME.fullmatch(n))
    if CURRENT_FILE in names:
        paths.append(os.path.join(directory, CURRENT_FILE))
    return paths


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


class EventLog:
    """
    Appends events for one router to the files of C{DATA-DIR/events/},
    closing the current file and starting the next as L{RotationSettings}
    says, and deleting the oldest closed files beyond its C{retain}.

    Records emitted during one turn of the reactor are written together at
    the end of it (a message-heavy router emits tens of thousands a
    second), and handed to the operating system before the next turn, so a
    router killed with SIGKILL loses none that were emitted before its last
    completed turn and leaves at worst a truncated last line, which the
    audit counts as malformed rather than misreading.

    A file is closed only between whole records, and its size is a running
    count of what was written (records are ASCII: one character, one
    byte), so deciding costs no system call.  A file is opened when the
    first records after a close are written, so there are no empty files,
    and its name's start time is when it was opened.

    It also counts what it records, in memory, for the router's
    C{/metrics} (L{meshroute.admin.metrics}): every message, link and
    session event already passes through here, batched where the data
    path is, so one increment per call counts them all at no cost the
    data path would notice.

    @ivar counts: how many records of each event were emitted since the
        log was opened.
    @ivar reasons: C{(event, reason)} → records, for the events of
        L{COUNTED_BY_REASON}.
    """

    def __init__(self, data_dir: str, router: str, clock: IReactorTime,
                 rotation: RotationSettings = RotationSettings(),
                 close_in_thread: bool = False) -> None:
        """
        @param close_in_thread: close files (fsync, rename, C{retain}) in a
            thread of their own, as a router does: an fsync of a 64 MiB
            file takes tens of milliseconds, which the reactor would
            otherwise wait (it waits only when more than L{MAX_CLOSING}
            files are waiting to be closed).  Without it files are closed
            in place (tests, one-shot tools).
        """
        self.data_dir = data_dir
        self.directory = events_dir(data_dir)
        self._router = router
        self._clock = clock
        self._rotation = rotation
        self._max_size = rotation.max_file_size
        os.makedirs(self.directory, exist_ok=True)
        self._seq, self._last_start = _recover(self.directory, data_dir)
        self._file = None
        self._current_path = os.path.join(self.directory, CURRENT_FILE)
        #: The closed name of the file being written.
        self._name: str | None = None
        self._size = 0
        self._age_call = None
        self._closed = False
        self._pending: list[str] = []
        self._flush_call = None
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[tuple[str, str]] = Counter()
        self._closed_files = _ClosedFiles(self.directory, rotation.retain)
        self._closed_files.apply_retention()
        self._closer = (ThreadPoolExecutor(1, thread_name_prefix="event-log-closer")
                        if close_in_thread else None)
        #: The closes handed to the closer, oldest first, some maybe done.
        self._closing: deque[Future] = deque()

    def emit(self, event: str, **fields) -> None:
        """
        Append one event.  C{fields} must be JSON-serialisable.
        """
        # One record: the C encoder over a dict is as cheap as _encoded.
        record = {"time": self._clock.seconds(), "router": self._router, "event": event}
        record.update(fields)
        self._append(_ENCODE(record))
        self.counts[event] += 1
        if event in COUNTED_BY_REASON:
            self.reasons[event, fields.get("reason")] += 1

    def emit_many(self, event: str, names: tuple, rows: list) -> None:
        """
        Append one C{event} per tuple in C{rows}, whose values are the
        fields C{names}, in that order (as C{emit(event, **dict(zip(names,
        row)))} would, one after the other): for the message records a
        batch of messages makes at once, encoded together (L{_encoded}).
        The values must be JSON-serialisable.
        """
        if not rows:
            return
        if len(rows) == 1:
            # One record: the C encoder over its dict costs less than
            # setting up a batch.
            record = {"time": self._clock.seconds(), "router": self._router, "event": event}
            record.update(zip(names, rows[0]))
            self._append(_ENCODE(record))
        else:
            self._append(_encoded(self._clock.seconds(), self._router, event, names, rows))
        self.counts[event] += len(rows)
        if event in COUNTED_BY_REASON:
            at = names.index("reason")
            self.reasons.update((event, row[at]) for row in rows)

    def _append(self, records: str) -> None:
        """
        Write C{records} (one or more lines, without the last one's end)
        at the end of this reactor turn.
        """
        self._pending.append(records)
        if self._flush_call is None:
            self._flush_call = self._clock.callLater(0, self.flush)

    def flush(self) -> None:
        """
        Write every pending record now, closing the file at the record
        boundaries where it reaches C{max-file-size}.
        """
        if self._flush_call is not None:
            if self._flush_call.active():
                self._flush_call.cancel()
            self._flush_call = None
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        data = "\n".join(pending) + "\n"
        if self._size + len(data) <= self._max_size:
            self._write(data)
        else:
            # A record has no line end in it (JSON escapes it).
            self._write_across_files(data[:-1].split("\n"))
        if self._size >= self._max_size:
            self.rotate()

    def _write_across_files(self, lines: list[str]) -> None:
        """
        Write C{lines}, which do not fit in the current file, closing files
        between them as they fill (a line longer than a file is written
        alone).  Where to cut is found by bisecting the running byte
        counts, not by a loop over the lines.
        """
        # ends[i]: the bytes of lines[0..i] with their line ends.
        ends = list(map(add, accumulate(map(len, lines)), range(1, len(lines) + 1)))
        start, written = 0, 0
        while start < len(lines):
            stop = bisect_right(ends, written + self._max_size - self._size, lo=start)
            if stop == start:
                if self._size > 0:
                    self.rotate()
                    continue
                stop = start + 1
            self._write("\n".join(lines[start:stop]) + "\n")
            start, written = stop, ends[stop - 1]
            if start < len(lines):
                self.rotate()

    def _write(self, data: str) -> None:
        if self._file is None:
            self._open()
        self._file.write(data)
        self._file.flush()
        self._size += len(data)

    def _open(self) -> None:
        """
        Start the next file, at L{CURRENT_FILE}, and decide the name it
        will have once closed.  Its start time never goes below the last
        file's, so that the names sort in order even if the clock steps
        back.
        """
        if self._closed:
            raise ValueError(f"the event log of {self.data_dir} is closed")
        start = max(_start_stamp(self._clock.seconds()), self._last_start)
        self._file = open(self._current_path, "x", encoding="utf-8")
        self._name = file_name(start, self._seq)
        self._size = 0
        self._seq += 1
        self._last_start = start
        self._start_age_timer()

    def _start_age_timer(self) -> None:
        if self._rotation.max_age_ms is not None:
            self._age_call = self._clock.callLater(self._rotation.max_age_ms / 1000,
                                                   self._aged)

    def _aged(self) -> None:
        self._age_call = None
        self.flush()
        self.rotate()

    def rotate(self) -> None:
        """
        Close the file being written, if any: rename it from
        L{CURRENT_FILE} to its own name with C{.open}, so that the next
        records start a new L{CURRENT_FILE}, and hand it to the closer,
        which fsyncs it and drops its C{.open} by a rename, so that it is
        whole wherever it is seen closed, then applies C{retain}.

        The first rename is the reactor's (it does not wait for the disk,
        as an fsync does), made after the file's last record is written:
        a follower of the path (C{tail -F}) reads the file to its end, then
        finds the next one there.  If it fails (a disk error), the file is
        written on as if it were a new one, to be renamed at the next
        rotation: no record waits, or is lost, for it.
        """
        if self._file is None:
            return
        if self._age_call is not None:
            if self._age_call.active():
                self._age_call.cancel()
            self._age_call = None
        self._file.flush()
        closing_path = os.path.join(self.directory, self._name + OPEN_SUFFIX)
        try:
            os.rename(self._current_path, closing_path)
        except OSError:
            _log.failure("Event log: cannot rename {path} to close it; writing on to it",
                         path=self._current_path)
            self._size = 0
            self._start_age_timer()
            return
        if self._closer is None:
            self._closed_files.close(self._file, closing_path, self._size)
        else:
            closing = self._closing
            closing.append(self._closer.submit(self._closed_files.close, self._file,
                                               closing_path, self._size))
            while closing and closing[0].done():
                closing.popleft()
            if len(closing) > MAX_CLOSING:
                # The disk falls behind: wait for it rather than hold ever
                # more files open.
                closing.popleft().result()
        self._file = None
        self._name = None
        self._size = 0

    def close(self) -> None:
        """
        Write what is pending and close the file, waiting for every file
        being closed; later emits are errors.
        """
        self.flush()
        self.rotate()
        if self._closer is not None:
            self._closer.shutdown(wait=True)
        self._closed = True


class _ClosedFiles:
    """
    The closed files of an events directory, oldest first, and the work of
    closing one and applying C{retain}: done by one thread at a time (the
    closer's, or the reactor's), in the order the files were written.
    """

    def __init__(self, directory: str, retain: int | None) -> None:
        self._directory = directory
        self._retain = retain
        self._files = deque((name, os.path.getsize(os.path.join(directory, name)))
                            for name in _closed_names(directory))
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
            _close_file(path)
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


def _close_file(path: str) -> None:
    """
    Make the event file at C{path} (a C{.open} one, written to disk) a
    closed one, by a durable rename (L{_move}).
    """
    _move(path, path[:-len(OPEN_SUFFIX)])


def _move(path: str, new_path: str) -> None:
    """
    Rename C{path} to C{new_path}, and sync the directory so the rename
    survives a crash.
    """
    os.rename(path, new_path)
    _sync_directory(os.path.dirname(new_path))


def _sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _recover(directory: str, data_dir: str) -> tuple[int, str]:
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
        match = _NAME.fullmatch(name) or _OPEN_NAME.fullmatch(name)
        if match:
            seq = max(seq, int(match[2]) + 1)
            last_start = max(last_start, match[1])
            if name.endswith(OPEN_SUFFIX):
                found.append(os.path.join(directory, name))
    for path in found:
        if _left_whole(path):
            _close_file(path)
            _log.info("Event log: closed {name}, which the last run left open",
                      name=os.path.basename(path))
    current = os.path.join(directory, CURRENT_FILE)
    # Its modification time before a line end is added: its last record's.
    start = max(_first_time(current), last_start) if os.path.isfile(current) else None
    if start is not None and _left_whole(current):
        name = file_name(start, seq)
        _move(current, os.path.join(directory, name))
        _log.info("Event log: closed {current} as {name}, which the last run left being "
                  "written", current=CURRENT_FILE, name=name)
        seq += 1
        last_start = start
    legacy = os.path.join(data_dir, LEGACY_FILE)
    if os.path.isfile(legacy):
        _end_last_line(legacy)
        start = _first_time(legacy)
        name = file_name(start, seq)
        _move(legacy, os.path.join(directory, name))
        _sync_directory(data_dir)
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
        return _start_stamp(float(json.loads(first)["time"]))
    except (ValueError, KeyError, TypeError, OverflowError, OSError):
        return _start_stamp(os.path.getmtime(path))


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
