"""
The event log on a file system that refuses its writes (L{EventLog}), a
real one: a tmpfs of a few pages, filled to its last byte.  What the
file system does not take waits in memory and is written when there is
room, a record cut by a short write completed rather than repeated; no
file is closed while records wait; the log says so once each way, not a
traceback per turn; past L{writer.MAX_WAITING}, records are lost and
counted.
"""

import json
import os

import pytest
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs

from support.small_disk import fill, small_disk

from meshroute.events import CURRENT_FILE, EventLog, RotationSettings, event_files, read_events
from meshroute.events import writer
from meshroute.events.directory import events_dir


@pytest.fixture
def disk(tmp_path):
    with small_disk(tmp_path / "disk", "256k") as mounted:
        yield mounted


def at() -> Clock:
    clock = Clock()
    clock.advance(1_700_000_000)
    return clock


def emit_turns(log: EventLog, clock: Clock, turns: int, per_turn: int, start: int = 0) -> int:
    """
    C{turns} reactor turns of C{per_turn} records C{n} each, numbered from
    C{start}; the next number.
    """
    n = start
    for _ in range(turns):
        log.emit_many("message.accepted", ("n", "pad"), [(n + i, "x" * 40)
                                                         for i in range(per_turn)])
        n += per_turn
        clock.advance(0)
    return n


@pytest.fixture
def refusals(observe_errors):
    """
    The errors the log says, expected here: taken from what the suite
    fails a test for.
    """
    yield
    observe_errors.take(lambda e: e.get("log_namespace") == "meshroute.events")


def messages(logged) -> list[str]:
    return [e["log_format"] for e in logged if e["log_namespace"] == "meshroute.events"]


def raw_lines(data_dir) -> list[str]:
    lines = []
    for path in event_files(str(data_dir)):
        with open(path, encoding="ascii") as f:
            lines += f.read().splitlines()
    return lines


def test_records_the_disk_refuses_wait_and_are_written_once_when_it_has_room(disk, refusals):
    """
    The file's last page takes part of a turn's records (a short write,
    a record cut in two), then the disk refuses; the records that wait
    are written after the cut once space is freed, each exactly once.
    """
    clock = at()
    log = EventLog(str(disk), "r", clock)
    n = emit_turns(log, clock, 1, 3)
    filler = fill(disk)
    with capturedLogs() as logged:
        n = emit_turns(log, clock, 20, 50, n)
        clock.advance(writer.RETRY_S * 3)
    refused = [e for e in logged if "cannot write" in e.get("log_format", "")]
    assert len(refused) == 1
    assert refused[0]["log_level"] == LogLevel.error
    assert refused[0]["why"] == os.strerror(28)  # ENOSPC
    assert not [e for e in logged if e["log_level"] == LogLevel.critical]
    # The file holds a cut record at its end: what fitted.
    with open(os.path.join(events_dir(str(disk)), CURRENT_FILE), encoding="ascii") as f:
        assert not f.read().endswith("\n")

    os.remove(filler)
    with capturedLogs() as logged:
        n = emit_turns(log, clock, 2, 10, n)
        clock.advance(writer.RETRY_S)
    assert messages(logged) == ["Event log: writing to {path} again; no record was lost"]
    log.close()
    lines = raw_lines(disk)
    assert [json.loads(line)["n"] for line in lines] == list(range(n))
    assert log.lost == 0


def test_no_file_closes_while_records_wait(disk, refusals):
    """
    Rotation by size and by age waits for the records that wait, so each
    closed file holds whole records; the rotation they held back comes
    once they are written.
    """
    clock = at()
    log = EventLog(str(disk), "r", clock,
                   RotationSettings(max_file_size=16 * 1024, max_age_ms=500))
    n = emit_turns(log, clock, 1, 1)
    filler = fill(disk)
    n = emit_turns(log, clock, 10, 50, n)  # well past max-file-size
    clock.advance(0.6)  # past max-age
    assert os.listdir(events_dir(str(disk))) == [CURRENT_FILE]
    os.remove(filler)
    clock.advance(writer.RETRY_S)
    assert CURRENT_FILE not in os.listdir(events_dir(str(disk)))
    n = emit_turns(log, clock, 1, 1, n)
    log.close()
    assert len(event_files(str(disk))) == 2
    for path in event_files(str(disk)):
        with open(path, encoding="ascii") as f:
            text = f.read()
        assert text.endswith("\n")
        assert all(json.loads(line) for line in text.splitlines())
    assert [r["n"] for r in read_events(str(disk))] == list(range(n))


def test_a_file_that_cannot_be_created_waits_as_records_do(tmp_path, refusals):
    """
    A file system out of inodes: the next file cannot be opened after a
    rotation; the records wait for it.
    """
    with small_disk(tmp_path / "disk", "256k", "nr_inodes=8") as disk:
        clock = at()
        log = EventLog(str(disk), "r", clock)
        n = emit_turns(log, clock, 1, 1)
        log.rotate()
        fillers = []
        while True:
            try:
                fillers.append(open(os.path.join(str(disk), f"f{len(fillers)}"), "x"))
            except OSError:
                break
        for f in fillers:
            f.close()
        with capturedLogs() as logged:
            n = emit_turns(log, clock, 3, 5, n)
            clock.advance(writer.RETRY_S)
        assert len([e for e in logged if "cannot write" in e.get("log_format", "")]) == 1
        os.remove(fillers[0].name)
        clock.advance(writer.RETRY_S)
        log.close()
        assert [r["n"] for r in read_events(str(disk))] == list(range(n))


def test_past_the_bound_newer_records_are_lost_and_counted(disk, monkeypatch, refusals):
    monkeypatch.setattr(writer, "MAX_WAITING", 4096)
    clock = at()
    log = EventLog(str(disk), "r", clock)
    n = emit_turns(log, clock, 1, 1)
    filler = fill(disk)
    n = emit_turns(log, clock, 40, 10, n)
    assert log.lost > 0
    os.remove(filler)
    with capturedLogs() as logged:
        clock.advance(writer.RETRY_S)
    [again] = [e for e in logged if "again" in e.get("log_format", "")]
    assert again["log_level"] == LogLevel.error
    assert again["lost"] == log.lost
    log.close()
    kept = [r["n"] for r in read_events(str(disk))]
    assert len(kept) + log.lost == n
    # What was kept is the oldest, in order, with no record cut.
    assert kept == list(range(len(kept)))


def test_closing_while_the_disk_refuses_says_what_is_lost(disk, refusals):
    clock = at()
    log = EventLog(str(disk), "r", clock)
    n = emit_turns(log, clock, 1, 1)
    fill(disk)
    emit_turns(log, clock, 5, 20, n)
    with capturedLogs() as logged:
        log.close()
    [lost] = [e for e in logged if "closing with" in e.get("log_format", "")]
    assert lost["size"] > 0
    assert clock.getDelayedCalls() == []
