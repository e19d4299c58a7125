"""
The event log's files (L{meshroute.events}): written at C{current.jsonl},
closed at record boundaries when they reach C{max-file-size} or
C{max-age}, never written again, the oldest deleted beyond C{retain}; what
the next start makes of the files a killed router left; and the readers
every tool uses.  (A follower of C{current.jsonl}'s path:
tests/events/test_event_tail.py.)
"""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from support.closed_event_files import is_closed

from meshroute.events import (
    CURRENT_FILE,
    OPEN_SUFFIX,
    EventFollower,
    EventLog,
    RetainBytes,
    RotationSettings,
    event_files,
    events_dir,
    read_events,
)
from meshroute.events import reading, writer

#: 2023-11-14T22:13:20Z
T0 = 1_700_000_000.0


def at(seconds: float = T0) -> Clock:
    clock = Clock()
    clock.advance(seconds)
    return clock


def names(data_dir) -> list[str]:
    return [os.path.basename(p) for p in event_files(str(data_dir))]


def closed(data_dir) -> list[str]:
    """
    The paths of a data dir's closed event files (what the streaming
    audit reads), oldest first.
    """
    return list(filter(is_closed, event_files(str(data_dir))))


def lines_of(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines(keepends=True)


def emit_batches(log: EventLog, clock: Clock, batches: list[int], first: int = 0) -> list[int]:
    """
    Emit C{n} records per reactor turn for each C{n} in C{batches},
    numbered in order from C{first}; return the numbers.
    """
    numbers = []
    for size in batches:
        for _ in range(size):
            n = first + len(numbers)
            log.emit("message.accepted", n=n, msg_id=f"m{n:08d}")
            numbers.append(n)
        clock.advance(0)
    return numbers


def test_names_sort_in_writing_order_and_files_open_lazily(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024))
    assert os.listdir(events_dir(str(tmp_path))) == []
    emit_batches(log, clock, [1])
    assert names(tmp_path) == [CURRENT_FILE]
    clock.advance(5)  # the name is the second the file was opened
    log.rotate()
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl"]
    emit_batches(log, clock, [1])
    log.close()
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl",
                               "events-20231114T221325Z-000001.jsonl"]


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.integers(0, 40), max_size=12),
       max_size=st.integers(1024, 4096))
def test_size_rotation_closes_files_between_whole_records(tmp_path_factory, batches,
                                                          max_size):
    """
    Whatever the batches, every record is written once, whole, in order;
    every closed file but those holding one record is within the size,
    and only the last file can be below it by more than a record.
    """
    data_dir = tmp_path_factory.mktemp("d")
    clock = at()
    log = EventLog(str(data_dir), "r", clock, RotationSettings(max_file_size=max_size))
    numbers = emit_batches(log, clock, batches)
    log.close()
    paths = event_files(str(data_dir))
    assert paths == closed(data_dir)
    assert [r["n"] for r in read_events(str(data_dir))] == numbers
    for path in paths:
        lines = lines_of(path)
        assert lines and all(line.endswith("\n") for line in lines)
        size = os.path.getsize(path)
        assert size <= max_size or len(lines) == 1
    for path, following in zip(paths, paths[1:]):
        first_of_next = len(lines_of(following)[0])
        assert os.path.getsize(path) + first_of_next > max_size


def test_a_record_longer_than_the_size_is_written_alone(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024))
    log.emit("a")
    log.emit("big", blob="x" * 3000)
    log.emit("c")
    log.close()
    assert [[json.loads(line)["event"] for line in lines_of(p)]
            for p in event_files(str(tmp_path))] == [["a"], ["big"], ["c"]]


def test_a_closed_file_is_never_written_again(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024))
    emit_batches(log, clock, [30])
    paths = closed(tmp_path)
    assert paths and names(tmp_path)[-1] == CURRENT_FILE
    before = {p: (os.path.getsize(p), os.stat(p).st_mtime_ns) for p in paths}
    emit_batches(log, clock, [30, 30])
    log.close()
    assert {p: (os.path.getsize(p), os.stat(p).st_mtime_ns) for p in paths} == before


def test_age_closes_the_file_on_a_timer(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_age_ms=60_000))
    emit_batches(log, clock, [3])
    clock.advance(59)
    log.emit("late")
    clock.advance(0.5)
    assert names(tmp_path) == [CURRENT_FILE]
    clock.advance(0.5)
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl"]
    assert [json.loads(line)["event"] for line in lines_of(event_files(str(tmp_path))[0])] == [
        "message.accepted"] * 3 + ["late"]
    clock.advance(3600)
    assert len(names(tmp_path)) == 1, "no empty files while nothing happens"
    emit_batches(log, clock, [1])
    assert names(tmp_path)[1] == CURRENT_FILE
    log.close()
    assert names(tmp_path)[1] == "events-20231114T231420Z-000001.jsonl"


def test_records_pending_when_the_age_timer_fires_go_in_the_aged_file(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_age_ms=1000))
    emit_batches(log, clock, [1])
    log.emit("pending")
    log._flush_call.cancel()  # the age timer comes first in this turn
    log._flush_call = None
    clock.advance(1)
    [path] = event_files(str(tmp_path))
    assert [path] == closed(tmp_path)
    assert [json.loads(line)["event"] for line in lines_of(path)][-1] == "pending"


def test_a_size_rotation_cancels_the_age_timer(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock,
                   RotationSettings(max_file_size=1024, max_age_ms=1000))
    emit_batches(log, clock, [30])
    assert len(clock.getDelayedCalls()) == 1, "one timer: the open file's"
    log.close()
    assert clock.getDelayedCalls() == []


def test_retention_by_count_deletes_the_oldest_closed_files_and_logs_them(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024, retain=2))
    with capturedLogs() as events:
        emit_batches(log, clock, [10] * 10)
    kept_files = closed(tmp_path)
    assert len(kept_files) == 2
    deleted = [e for e in events if "deleted" in e.get("log_format", "")]
    seqs = sorted(int(os.path.basename(p).split("-")[2][:6]) for p in kept_files)
    assert sorted(e["name"] for e in deleted) == [
        f"events-20231114T221320Z-{seq:06d}.jsonl" for seq in range(seqs[0])]
    assert all(e["size"] > 0 for e in deleted)
    # The newest records are all there.
    kept = [r["n"] for r in read_events(str(tmp_path))]
    assert kept == list(range(kept[0], 100))
    log.close()


def test_retention_by_bytes_keeps_the_newest_files_within_the_total(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock,
                   RotationSettings(max_file_size=1024, retain=RetainBytes(2500)))
    emit_batches(log, clock, [10] * 10)
    log.close()
    sizes = [os.path.getsize(p) for p in event_files(str(tmp_path))]
    assert sum(sizes) <= 2500 < sum(sizes) + 1024 - 100
    assert [r["n"] for r in read_events(str(tmp_path))][-1] == 99


def test_retention_never_deletes_the_open_file(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock,
                   RotationSettings(max_file_size=1024, retain=RetainBytes(1)))
    emit_batches(log, clock, [10] * 3)
    assert names(tmp_path) == [CURRENT_FILE]
    log.close()


def leftover(data_dir, name: str, text: str) -> str:
    directory = events_dir(str(data_dir))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_a_file_left_open_is_closed_at_start_with_its_truncated_line_ended(tmp_path):
    """
    A C{.open} file: one the closer had not closed when the router was
    killed, or the file being written of a router from before
    C{current.jsonl}, so an upgrade loses nothing.
    """
    leftover(tmp_path, "events-20231114T221000Z-000004.jsonl",
             '{"time":1,"router":"r","event":"a"}\n')
    leftover(tmp_path, "events-20231114T221100Z-000005.jsonl.open",
             '{"time":2,"router":"r","event":"b"}\n{"time":17')
    clock = at()
    with capturedLogs() as events:
        log = EventLog(str(tmp_path), "r", clock)
    assert names(tmp_path) == ["events-20231114T221000Z-000004.jsonl",
                               "events-20231114T221100Z-000005.jsonl"]
    assert [e["name"] for e in events if "left open" in e.get("log_format", "")] == [
        "events-20231114T221100Z-000005.jsonl.open"]
    log.emit("router.started", pid=1)
    log.close()
    assert names(tmp_path)[-1] == "events-20231114T221320Z-000006.jsonl"
    assert [r["event"] for r in read_events(str(tmp_path))] == ["a", "b", "router.started"]
    assert lines_of(event_files(str(tmp_path))[1])[-1] == '{"time":17\n'


def test_a_current_file_left_by_a_killed_router_is_closed_under_its_own_name(tmp_path):
    """
    Killed in the middle of a rotation: the file it had renamed to close
    it and the C{current.jsonl} it had started are both closed at the next
    start, C{current.jsonl} with the name it would have had (C{START} from
    its first record, the next C{SEQ}) and its truncated line ended.
    """
    leftover(tmp_path, "events-20231114T221000Z-000004.jsonl",
             '{"time":1699999800.5,"router":"r","event":"a"}\n')
    leftover(tmp_path, "events-20231114T221100Z-000005.jsonl.open",
             '{"time":1699999860.5,"router":"r","event":"b"}\n')
    leftover(tmp_path, CURRENT_FILE,
             '{"time":1699999921.5,"router":"r","event":"c"}\n{"time":17')
    with capturedLogs() as events:
        log = EventLog(str(tmp_path), "r", at())
    assert names(tmp_path) == ["events-20231114T221000Z-000004.jsonl",
                               "events-20231114T221100Z-000005.jsonl",
                               "events-20231114T221201Z-000006.jsonl"]
    assert [(e["current"], e["name"]) for e in events
            if "left being written" in e.get("log_format", "")] == [
        (CURRENT_FILE, "events-20231114T221201Z-000006.jsonl")]
    assert lines_of(event_files(str(tmp_path))[2])[-1] == '{"time":17\n'
    log.emit("d")
    log.close()
    assert names(tmp_path)[-1] == "events-20231114T221320Z-000007.jsonl"
    assert [r["event"] for r in read_events(str(tmp_path))] == ["a", "b", "c", "d"]


def test_a_current_file_is_never_named_before_the_files_it_follows(tmp_path):
    """
    Its first record older than the latest file's start (the clock
    stepped back), or unreadable (its modification time is used then), a
    C{current.jsonl} left behind still sorts after the files before it.
    """
    leftover(tmp_path, "events-20231114T221000Z-000004.jsonl",
             '{"time":1,"router":"r","event":"a"}\n')
    leftover(tmp_path, CURRENT_FILE, '{"time":1600000000.0,"router":"r","event":"b"}\n')
    EventLog(str(tmp_path), "r", at()).close()
    assert names(tmp_path)[-1] == "events-20231114T221000Z-000005.jsonl"
    path = leftover(tmp_path, CURRENT_FILE, '{"tim')
    os.utime(path, (T0 + 3600, T0 + 3600))
    EventLog(str(tmp_path), "r", at()).close()
    assert names(tmp_path)[-1] == "events-20231114T231320Z-000006.jsonl"
    assert [r["event"] for r in read_events(str(tmp_path))] == ["a", "b"]


def test_an_empty_current_file_left_behind_is_deleted(tmp_path):
    leftover(tmp_path, CURRENT_FILE, "")
    EventLog(str(tmp_path), "r", at()).close()
    assert os.listdir(events_dir(str(tmp_path))) == []


def test_a_file_that_cannot_be_renamed_is_written_on_and_renamed_later(tmp_path, monkeypatch,
                                                                      observe_errors):
    """
    A disk error on the rename that starts closing a file: it is logged,
    the records go on into the same file, and the next rotation closes it.
    """
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024))
    rename = os.rename
    failures = []

    def failing_once(source, destination):
        if not failures:
            failures.append(source)
            raise OSError(5, "Input/output error")
        rename(source, destination)

    monkeypatch.setattr(os, "rename", failing_once)
    numbers = emit_batches(log, clock, [10, 10, 10])
    assert [e["path"] for e in observe_errors.take(
        lambda e: "cannot rename" in e.get("log_format", ""))] == failures
    log.close()
    first = closed(tmp_path)[0]
    assert os.path.getsize(first) > 1024, "written on past max-file-size"
    assert [r["n"] for r in read_events(str(tmp_path))] == numbers


def test_a_whole_file_left_open_gets_no_blank_line_and_an_empty_one_goes(tmp_path):
    whole = '{"time":1,"router":"r","event":"a"}\n'
    leftover(tmp_path, "events-20231114T221000Z-000000.jsonl.open", whole)
    leftover(tmp_path, "events-20231114T221000Z-000001.jsonl.open", "")
    EventLog(str(tmp_path), "r", at()).close()
    assert names(tmp_path) == ["events-20231114T221000Z-000000.jsonl"]
    assert lines_of(event_files(str(tmp_path))[0]) == [whole]


def test_the_sequence_continues_across_restarts_and_names_never_go_back(tmp_path):
    for seconds in (T0, T0 + 1, T0 - 86400):  # the clock stepped back a day
        clock = at(seconds)
        log = EventLog(str(tmp_path), "r", clock)
        log.emit("router.started")
        log.close()
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl",
                               "events-20231114T221321Z-000001.jsonl",
                               "events-20231114T221321Z-000002.jsonl"]


def test_an_events_jsonl_from_before_rotation_becomes_the_first_closed_file(tmp_path):
    (tmp_path / "events.jsonl").write_text('{"time":1600000000.5,"router":"r","event":"old"}\n'
                                           '{"time":16')
    assert names(tmp_path) == ["events.jsonl"], "readers see it before the first start"
    with capturedLogs() as events:
        log = EventLog(str(tmp_path), "r", at())
    assert [e for e in events if "older meshroute" in e.get("log_format", "")]
    log.emit("new")
    log.close()
    assert not (tmp_path / "events.jsonl").exists()
    assert names(tmp_path) == ["events-20200913T122640Z-000000.jsonl",
                               "events-20231114T221320Z-000001.jsonl"]
    assert [r["event"] for r in read_events(str(tmp_path))] == ["old", "new"]


def test_a_reader_follows_a_file_closed_after_it_was_listed(tmp_path, monkeypatch):
    path = leftover(tmp_path, "events-20231114T221000Z-000000.jsonl.open",
                    '{"time":1,"router":"r","event":"a"}\n{"time":2,"router":"r","event":"b"}\n')
    listed = event_files(str(tmp_path))
    os.rename(path, path[:-len(OPEN_SUFFIX)])
    monkeypatch.setattr(reading, "event_files", lambda data_dir: listed)
    assert [r["event"] for r in read_events(str(tmp_path))] == ["a", "b"]


@pytest.mark.parametrize("rotations", [1, 2])
def test_a_reader_reads_the_current_file_once_if_it_is_closed_while_listing(
        tmp_path, monkeypatch, rotations):
    """
    The file being written is opened before the others are listed; closed
    meanwhile (and maybe the next one too), it is read once, in its
    place, and none of its records is missed.
    """
    clock = at()
    log = EventLog(str(tmp_path), "r", clock)
    emit_batches(log, clock, [2])
    listing = reading.event_files

    def rotating_listing(data_dir):
        for n in range(rotations):
            log.rotate()
            emit_batches(log, clock, [2], first=2 + 2 * n)
        return listing(data_dir)

    monkeypatch.setattr(reading, "event_files", rotating_listing)
    # What was written until its file was closed: the file being written
    # at the end of the listing is not read.
    assert [r["n"] for r in read_events(str(tmp_path))] == list(range(2 * rotations))
    monkeypatch.undo()
    log.close()
    assert [r["n"] for r in read_events(str(tmp_path))] == list(range(2 + 2 * rotations))


def test_readers_skip_a_last_line_being_written(tmp_path):
    leftover(tmp_path, "events-20231114T221000Z-000000.jsonl.open",
             '{"time":1,"router":"r","event":"a"}\n{"time":2,"rou')
    assert [r["event"] for r in read_events(str(tmp_path))] == ["a"]


def test_the_follower_reads_each_record_once_across_rotations(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024))
    written = emit_batches(log, clock, [5])
    follower = EventFollower(str(tmp_path), from_end=True)
    seen = []
    for batch in ([3], [20, 1], [], [40]):
        written += emit_batches(log, clock, batch, first=len(written))
        seen.extend(r["n"] for r in follower.new_events())
    log.close()
    seen.extend(r["n"] for r in follower.new_events())
    follower.close()
    assert seen == list(range(5, 69))


def test_the_follower_reads_on_past_a_file_retention_deleted_before_it_was_back(tmp_path):
    """
    The file the follower was reading as C{current.jsonl}, closed and then
    deleted by retention before the next call: the follower goes on with
    the files there, each record once.
    """
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024, retain=1))
    follower = EventFollower(str(tmp_path))
    written = emit_batches(log, clock, [3])
    assert [r["n"] for r in follower.new_events()] == written
    written += emit_batches(log, clock, [10] * 6, first=len(written))
    assert len(closed(tmp_path)) == 1 and os.path.basename(closed(tmp_path)[0]) != (
        "events-20231114T221320Z-000000.jsonl"), "the first file is deleted"
    assert [r["n"] for r in follower.new_events()] == [r["n"] for r in read_events(str(tmp_path))]
    written += emit_batches(log, clock, [2], first=len(written))
    assert [r["n"] for r in follower.new_events()] == written[-2:]
    follower.close()
    log.close()


def test_events_after_close_are_refused(tmp_path):
    log = EventLog(str(tmp_path), "r", at())
    log.close()
    log.emit("late")
    with pytest.raises(ValueError, match="closed"):
        log.flush()


def test_files_closed_in_a_thread_are_all_closed_in_order_by_close(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024, retain=5),
                   close_in_thread=True)
    numbers = emit_batches(log, clock, [7] * 40)
    log.close()
    paths = event_files(str(tmp_path))
    assert len(paths) == 5 and not any(p.endswith(OPEN_SUFFIX) for p in paths)
    kept = [r["n"] for r in read_events(str(tmp_path))]
    assert kept == numbers[-len(kept):]


def test_the_audit_reads_a_data_dir_or_its_events_dir_as_the_files_in_order(tmp_path):
    from meshroute.audit.inputs import resolve_inputs

    (tmp_path / "events.jsonl").write_text('{"time":1,"router":"r","event":"old"}\n')
    (tmp_path / "store.db").write_bytes(b"not an event log")
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_file_size=1024))
    emit_batches(log, clock, [10, 10, 10])
    expected = event_files(str(tmp_path))
    assert os.path.basename(expected[-1]) == CURRENT_FILE and len(expected) > 3
    assert resolve_inputs([str(tmp_path)]) == expected, "current.jsonl last"
    assert resolve_inputs([events_dir(str(tmp_path))]) == expected
    assert resolve_inputs([str(tmp_path / "*" / "events-*.jsonl")]) == closed(tmp_path)
    log.close()


def test_the_writer_waits_for_the_closer_past_max_closing(tmp_path, monkeypatch):
    """
    Files waiting to be closed are bounded: the writer waits for the
    oldest instead of holding more open.
    """
    import threading

    clock = at()
    log = EventLog(str(tmp_path), "r", clock, close_in_thread=True)
    gate = threading.Event()
    close = log._closed_files.close

    def held_close(*args):
        gate.wait(60)
        close(*args)

    monkeypatch.setattr(log._closed_files, "close", held_close)
    monkeypatch.setattr(writer, "MAX_CLOSING", 3)

    def one_file(n: int) -> None:
        log.emit("e", n=n)
        clock.advance(0)
        log.rotate()

    for n in range(3):
        one_file(n)
    assert [p.endswith(OPEN_SUFFIX) for p in event_files(str(tmp_path))] == [True] * 3
    threading.Timer(0.2, gate.set).start()
    one_file(3)  # the fourth waits until the first is closed
    assert not event_files(str(tmp_path))[0].endswith(OPEN_SUFFIX)
    log.close()
    assert [r["n"] for r in read_events(str(tmp_path))] == [0, 1, 2, 3]
    assert not any(p.endswith(OPEN_SUFFIX) for p in event_files(str(tmp_path)))
