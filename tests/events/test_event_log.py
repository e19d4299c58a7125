"""
The event log's records, byte for byte, and the files they are written
to: rotation at record boundaries, by size and by age, retention, and what
the next start makes of the files a killed router left (see
tests/events/test_event_rotation.py).
"""

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from support.spark import spark  # noqa: F401 (a fixture)

from meshroute.events import EventLog, event_files
from meshroute.events.encoding import encode_record, encode_records


# The cheap encoder: byte for byte what the JSON encoder writes.

json_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text())
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    time=st.floats(allow_nan=False) | st.integers(),
    router=st.text(),
    event=st.text(),
    fields=st.lists(st.tuples(st.text(), json_values), max_size=6),
)
def test_records_are_byte_for_byte_the_json_encoders(time, router, event, fields):
    """
    Whatever the fields (names repeating each other or the head fields
    included, non-ASCII, NaN, nested), a record reads as the JSON encoder's
    encoding of the dict C{emit} used to build.
    """
    names = tuple(name for name, _ in fields)
    row = tuple(value for _, value in fields)
    record = {"time": time, "router": router, "event": event}
    record.update(zip(names, row))
    assert encode_records(time, router, event, names, [row]) == encode_record(record)


@settings(max_examples=300, deadline=None)
@given(
    time=st.floats(allow_nan=False) | st.integers(),
    router=st.text(),
    event=st.text(),
    names=st.lists(st.text(), max_size=5),
    data=st.data(),
)
def test_a_batch_of_records_is_byte_for_byte_the_json_encoders(time, router, event, names,
                                                              data):
    """
    Whether a field's value is the same in every record of a batch (then
    written once into the template), is one of a few, differs, or mixes
    types that compare equal (C{1} and C{True}, C{0.0} and C{-0.0}), each
    record reads as the JSON encoder's encoding of its dict.
    """
    names = tuple(names)
    pool = data.draw(st.lists(json_values | st.sampled_from([0, 1, True, False, 0.0, -0.0,
                                                             1.5, "%s", "%", None]),
                              min_size=1, max_size=3))
    rows = data.draw(st.lists(st.tuples(*[st.sampled_from(pool) for _ in names]),
                              min_size=1, max_size=9))
    head = {"time": time, "router": router, "event": event}
    assert encode_records(time, router, event, names, rows) == "\n".join(
        encode_record({**head, **dict(zip(names, row))}) for row in rows)


def test_emit_many_writes_one_record_per_row_in_order(tmp_path):
    clock = Clock()
    clock.advance(1700000000.25)
    log = EventLog(str(tmp_path), "router-a", clock)
    log.emit("router.started", pid=1)
    log.emit_many("message.consumed", ("msg_id", "queue", "accepted_at", "redelivered"),
                  [("m1", "q", 1.5, False), ("m2", "q\u00e9", 2.0, True)])
    log.close()
    [path] = event_files(str(tmp_path))
    assert open(path).read() == (
        '{"time":1700000000.25,"router":"router-a","event":"router.started","pid":1}\n'
        '{"time":1700000000.25,"router":"router-a","event":"message.consumed","msg_id":"m1",'
        '"queue":"q","accepted_at":1.5,"redelivered":false}\n'
        '{"time":1700000000.25,"router":"router-a","event":"message.consumed","msg_id":"m2",'
        '"queue":"q\\u00e9","accepted_at":2.0,"redelivered":true}\n'
    )


def test_emit_many_of_one_row_writes_what_emit_writes(tmp_path):
    clock = Clock()
    log = EventLog(str(tmp_path), "router-a", clock)
    row = ("m1", "router-b", "q", 1, 1.25, True)
    names = ("msg_id", "origin", "queue", "hops", "accepted_at", "persistent")
    log.emit_many("message.enqueued", names, [row])
    log.emit("message.enqueued", **dict(zip(names, row)))
    log.close()
    [path] = event_files(str(tmp_path))
    first, second = open(path).read().splitlines()
    assert first == second
    assert log.counts["message.enqueued"] == 2


def test_the_audit_reads_message_records_written_in_batches(spark, tmp_path):  # noqa: F811
    """
    The audit's reader (L{meshroute.audit.read}) takes every batched
    message record as a good event, with the fields it was given.
    """
    from meshroute.audit.read import load_lines, parse_lines

    clock = Clock()
    clock.advance(1700000000.5)
    log = EventLog(str(tmp_path), "router-b", clock)
    batches = {
        "message.accepted": (("msg_id", "origin", "dest", "size", "persistent"),
                             [(f"a{i}", "router-b", "q@router-c", 100, True) for i in range(3)]),
        "message.forwarded": (("msg_id", "peer", "origin", "hops"),
                              [(f"f{i}", "router-c", "router-a", 2) for i in range(3)]),
        "message.enqueued": (("msg_id", "origin", "queue", "hops", "accepted_at", "persistent"),
                             [(f"e{i}", "router-a", "q", 1, 1699999999.75, False)
                              for i in range(3)]),
        "message.consumed": (("msg_id", "queue", "origin", "accepted_at", "persistent",
                              "redelivered"),
                             [(f"c{i}", "q", "router-a", 1699999999.5, True, i == 1)
                              for i in range(3)]),
    }
    for event, (names, rows) in batches.items():
        log.emit_many(event, names, rows)
    log.close()

    parsed = parse_lines(load_lines(spark, event_files(str(tmp_path)))).collect()
    assert [row["problem"] for row in parsed] == [None] * 12
    read = [row.asDict() for row in parsed]
    expected = [{"time": 1700000000.5, "router": "router-b", "event": event,
                 **dict(zip(names, values))}
                for event, (names, rows) in batches.items() for values in rows]
    assert [{key: row[key] for key in record} for row, record in zip(read, expected)] == expected
