"""
The event log's files (L{meshroute.events}): closed at record boundaries
when they reach C{max-file-size} or C{max-age}, never written again, the
oldest deleted beyond C{retain}; what the next start makes of the files a
killed router left; and the readers every tool uses.
"""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from meshroute.events import (
    OPEN_SUFFIX,
    EventFollower,
    EventLog,
    RetainBytes,
    RotationSettings,
    event_files,
    events_dir,
    read_events,
)

#: 2023-11-14T22:13:20Z
T0 = 1_700_000_000.0


def at(seconds: float = T0) -> Clock:
    clock = Clock()
    clock.advance(seconds)
    return clock


def names(data_dir) -> list[str]:
    return [os.path.basename(p) for p in event_files(str(data_dir))]


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
    [open_file] = names(tmp_path)
    assert open_file == "events-20231114T221320Z-000000.jsonl.open"
    log.rotate()
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl"]
    emit_batches(log, clock, [1])
    log.close()
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl",
                               "events-20231114T221320Z-000001.jsonl"]


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
    assert not any(p.endswith(OPEN_SUFFIX) for p in paths)
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
    closed = [p for p in event_files(str(tmp_path)) if not p.endswith(OPEN_SUFFIX)]
    before = {p: (os.path.getsize(p), os.stat(p).st_mtime_ns) for p in closed}
    emit_batches(log, clock, [30, 30])
    log.close()
    assert {p: (os.path.getsize(p), os.stat(p).st_mtime_ns) for p in closed} == before


def test_age_closes_the_file_on_a_timer(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_age_ms=60_000))
    emit_batches(log, clock, [3])
    clock.advance(59)
    log.emit("late")
    clock.advance(0.5)
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl.open"]
    clock.advance(0.5)
    assert names(tmp_path) == ["events-20231114T221320Z-000000.jsonl"]
    assert [json.loads(line)["event"] for line in lines_of(event_files(str(tmp_path))[0])] == [
        "message.accepted"] * 3 + ["late"]
    clock.advance(3600)
    assert len(names(tmp_path)) == 1, "no empty files while nothing happens"
    emit_batches(log, clock, [1])
    assert names(tmp_path)[1] == "events-20231114T231420Z-000001.jsonl.open"
    log.close()


def test_records_pending_when_the_age_timer_fires_go_in_the_aged_file(tmp_path):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock, RotationSettings(max_age_ms=1000))
    emit_batches(log, clock, [1])
    log.emit("pending")
    log._flush_call.cancel()  # the age timer comes first in this turn
    log._flush_call = None
    clock.advance(1)
    [path] = event_files(str(tmp_path))
    assert not path.endswith(OPEN_SUFFIX)
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
    remaining = event_files(str(tmp_path))
    closed = [p for p in remaining if not p.endswith(OPEN_SUFFIX)]
    assert len(closed) == 2
    deleted = [e for e in events if "deleted" in e.get("log_format", "")]
    seqs = sorted(int(os.path.basename(p).split("-")[2][:6]) for p in closed)
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
    assert [p.endswith(OPEN_SUFFIX) for p in event_files(str(tmp_path))] == [True]
    log.close()


def leftover(data_dir, name: str, text: str) -> str:
    directory = events_dir(str(data_dir))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_a_file_left_open_is_closed_at_start_with_its_truncated_line_ended(tmp_path):
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


def test_a_reader_follows_the_open_file_closed_after_it_was_listed(tmp_path, monkeypatch):
    clock = at()
    log = EventLog(str(tmp_path), "r", clock)
    emit_batches(log, clock, [2])
    listed = event_files(str(tmp_path))
    log.close()
    import meshroute.events

    monkeypatch.setattr(meshroute.events, "event_files", lambda data_dir: listed)
    assert [r["n"] for r in read_events(str(tmp_path))] == [0, 1]


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
    assert seen == list(range(5, 69))


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
    assert expected[-1].endswith(OPEN_SUFFIX) and len(expected) > 3
    assert resolve_inputs([str(tmp_path)]) == expected
    assert resolve_inputs([events_dir(str(tmp_path))]) == expected
    assert resolve_inputs([str(tmp_path / "*" / "events-*.jsonl")]) == [
        p for p in expected if not p.endswith(OPEN_SUFFIX)]
    log.close()
