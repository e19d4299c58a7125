"""
The event log after a crash: a router killed in the middle of a write
leaves a truncated last line; the next life's records must stay whole.
"""

from twisted.internet.task import Clock

from meshroute.events import EventLog, read_events


def test_truncated_last_line_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"time":1,"router":"r","event":"a"}\n{"time":17')
    log = EventLog(str(path), "r", Clock())
    log.emit("router.started", pid=1)
    log.close()
    assert [r["event"] for r in read_events(str(path))] == ["a", "router.started"]


def test_whole_file_gets_no_blank_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"time":1,"router":"r","event":"a"}\n')
    log = EventLog(str(path), "r", Clock())
    log.emit("b")
    log.close()
    assert path.read_text().count("\n") == 2
