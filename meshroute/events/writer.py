"""
The writer of a router's event log: L{EventLog}.
"""

import os
from bisect import bisect_right
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import accumulate
from operator import add

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.events.closing import ClosedFiles
from meshroute.events.directory import (
    CURRENT_FILE,
    OPEN_SUFFIX,
    events_dir,
    file_name,
    start_stamp,
)
from meshroute.events.encoding import encode_record, encode_records
from meshroute.events.names import COUNTED_BY_REASON
from meshroute.events.recovery import recover
from meshroute.events.settings import RotationSettings

#: Files handed to the closer thread and not closed yet, at most: past it
#: the writer waits for the oldest, so a disk slower than the events
#: holds up the router instead of its open files piling up.
MAX_CLOSING = 16

#: How often a log whose file system refuses its records (a full disk,
#: an I/O error) tries them again, in seconds.
RETRY_S = 1.0

#: Bytes of records a log keeps in memory while its file system refuses
#: them, at most: past it, newer records are lost (and counted), rather
#: than the router's memory.  A router whose disk is low takes no new
#: message ([store] min-free-disk), so what waits is mostly link and
#: session records, a few hundred bytes each.
MAX_WAITING = 64 * 1024 * 1024

_log = Logger(namespace="meshroute.events")


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

    When the file system refuses a write (the disk is full, or failing),
    what it did not take waits in memory, in order, and is tried again
    every L{RETRY_S}: a record cut by a short write is completed, not
    repeated, and no file is closed until what waits is written, so every
    file holds whole records.  The log says so once when its writes start
    failing and once when they succeed again, rather than a traceback per
    turn.  Past L{MAX_WAITING} bytes, newer records are lost, and counted
    (C{lost}).

    It also counts what it records, in memory, for the router's
    C{/metrics} (L{meshroute.admin.metrics}): every message, link and
    session event already passes through here, batched where the data
    path is, so one increment per call counts them all at no cost the
    data path would notice.

    @ivar counts: how many records of each event were emitted since the
        log was opened.
    @ivar reasons: C{(event, reason)} → records, for the events of
        L{meshroute.events.names.COUNTED_BY_REASON}.
    @ivar lost: records that could not be written, since the log was opened.
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
        self._seq, self._last_start = recover(self.directory, data_dir)
        self._file = None
        self._current_path = os.path.join(self.directory, CURRENT_FILE)
        #: The closed name of the file being written.
        self._name: str | None = None
        self._size = 0
        self._age_call = None
        self._closed = False
        self._pending: list[str] = []
        self._flush_call = None
        #: What the file system has not taken yet, when it refuses (None
        #: while writes succeed): written ahead of any later record.
        self._waiting: bytearray | None = None
        self._retry_call = None
        self.lost = 0
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[tuple[str, str]] = Counter()
        self._closed_files = ClosedFiles(self.directory, rotation.retain)
        self._closed_files.apply_retention()
        self._closer = (ThreadPoolExecutor(1, thread_name_prefix="event-log-closer")
                        if close_in_thread else None)
        #: The closes handed to the closer, oldest first, some maybe done.
        self._closing: deque[Future] = deque()

    @property
    def waiting(self) -> int:
        """
        Bytes of records waiting for the file system to take them.
        """
        return 0 if self._waiting is None else len(self._waiting)

    def emit(self, event: str, **fields) -> None:
        """
        Append one event.  C{fields} must be JSON-serialisable.
        """
        # One record: the C encoder over a dict is as cheap as encode_records.
        record = {"time": self._clock.seconds(), "router": self._router, "event": event}
        record.update(fields)
        self._append(encode_record(record))
        self.counts[event] += 1
        if event in COUNTED_BY_REASON:
            self.reasons[event, fields.get("reason")] += 1

    def emit_many(self, event: str, names: tuple, rows: list) -> None:
        """
        Append one C{event} per tuple in C{rows}, whose values are the
        fields C{names}, in that order (as C{emit(event, **dict(zip(names,
        row)))} would, one after the other): for the message records a
        batch of messages makes at once, encoded together
        (L{meshroute.events.encoding.encode_records}).
        The values must be JSON-serialisable.
        """
        if not rows:
            return
        if len(rows) == 1:
            # One record: the C encoder over its dict costs less than
            # setting up a batch.
            record = {"time": self._clock.seconds(), "router": self._router, "event": event}
            record.update(zip(names, rows[0]))
            self._append(encode_record(record))
        else:
            self._append(encode_records(self._clock.seconds(), self._router, event, names, rows))
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
        if self._waiting is not None or self._size + len(data) <= self._max_size:
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
            if self._waiting is not None:
                # No file closes before what waits is written.
                self._write("\n".join(lines[start:]) + "\n")
                return
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
        """
        Write C{data} (whole records) to the current file, opening one if
        need be; if the file system does not take all of it, the rest
        waits (L{_retry}).  While records wait, C{data} waits behind them,
        or is lost past L{MAX_WAITING}.
        """
        if self._waiting is not None:
            if len(self._waiting) + len(data) > MAX_WAITING:
                self.lost += data.count("\n")
            else:
                self._waiting += data.encode("ascii")
            return
        encoded = data.encode("ascii")
        try:
            if self._file is None:
                self._open()
            written = self._file.write(encoded)
        except OSError as error:
            self._waiting = bytearray(encoded)
            self._refused(error)
            return
        self._size += written
        if written < len(encoded):
            # A short write: the next one says why, if it fails.
            self._waiting = bytearray(encoded[written:])
            error = self._write_waiting()
            if error is None:
                self._waiting = None
            else:
                self._refused(error)

    def _write_waiting(self) -> OSError | None:
        """
        Write the records that wait, as far as the file system takes
        them: None once all are written, else why not.
        """
        waiting = self._waiting
        try:
            if self._file is None:
                self._open()
            while waiting:
                written = self._file.write(waiting)
                if not written:
                    raise OSError("the file system took none of them")
                self._size += written
                del waiting[:written]
        except OSError as error:
            return error
        return None

    def _refused(self, error: OSError) -> None:
        """
        The file system refused records: say so, and try them again in
        L{RETRY_S}.
        """
        _log.error("Event log: cannot write to {path} ({why}); its records wait in memory "
                   "(at most {limit} bytes) and are tried again every {retry} s",
                   path=self._current_path, why=error.strerror or str(error),
                   limit=MAX_WAITING, retry=RETRY_S)
        self._retry_call = self._clock.callLater(RETRY_S, self._retry)

    def _retry(self) -> None:
        self._retry_call = None
        if self._write_waiting() is not None:
            self._retry_call = self._clock.callLater(RETRY_S, self._retry)
            return
        self._waiting = None
        if self.lost:
            _log.error("Event log: writing to {path} again; {lost} records were lost while "
                       "it could not (more than {limit} bytes waited)",
                       path=self._current_path, lost=self.lost, limit=MAX_WAITING)
        else:
            _log.info("Event log: writing to {path} again; no record was lost",
                      path=self._current_path)
        aged = self._rotation.max_age_ms is not None and self._age_call is None
        if self._size >= self._max_size or aged:
            self.rotate()

    def _open(self) -> None:
        """
        Start the next file, at L{CURRENT_FILE}, and decide the name it
        will have once closed.  Its start time never goes below the last
        file's, so that the names sort in order even if the clock steps
        back.
        """
        if self._closed:
            raise ValueError(f"the event log of {self.data_dir} is closed")
        start = max(start_stamp(self._clock.seconds()), self._last_start)
        # Unbuffered, so that a write's count says what the file system
        # took (records are ASCII).
        self._file = open(self._current_path, "xb", buffering=0)
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
        rotation: no record waits, or is lost, for it.  Nor is a file
        closed while records wait to be written to it.
        """
        if self._file is None or self._waiting is not None:
            return
        if self._age_call is not None:
            if self._age_call.active():
                self._age_call.cancel()
            self._age_call = None
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
        being closed; later emits are errors.  Records the file system
        still refuses are lost, and logged.
        """
        self.flush()
        if self._retry_call is not None:
            self._retry_call.cancel()
            self._retry_call = None
        if self._waiting is not None and self._write_waiting() is not None:
            _log.error("Event log: closing with {size} bytes of records its file system "
                       "did not take; they are lost", size=len(self._waiting))
        self._waiting = None
        self.rotate()
        if self._closer is not None:
            self._closer.shutdown(wait=True)
        self._closed = True
