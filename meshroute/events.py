"""
The router's event log: C{DATA-DIR/events.jsonl}, one JSON object per
line, appended as things happen.

Every record has C{time} (epoch seconds, float, from the router's clock),
C{router} and C{event}; the rest of its fields depend on the event and are
listed in docs/events.md.  The audit pipeline reads these files from many
routers, so event names and fields are a stable contract: add fields,
never rename them.
"""

import json
import os
from collections import Counter
from json.encoder import c_make_encoder, encode_basestring_ascii

from twisted.internet.interfaces import IReactorTime

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
#: L{_lines} falls back to for values it does not encode itself):
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
    bool: lambda v: "true" if v else "false",
    type(None): lambda v: "null",
}
#: The fields every record starts with; a record naming one of them again
#: is encoded as a dict, where the later value takes the first one's place.
_HEAD = ("time", "router", "event")
#: A %-template per tuple of field names (see L{_template}); the names
#: come from the code's emit calls, so there are a few dozen.
_templates: dict[tuple, str | None] = {}


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


def _template(names: tuple) -> str | None:
    """
    The %-template of a record with fields C{names} after the head (None
    if one of them repeats a head field): the JSON punctuation and keys
    written once, the values left as C{%s}.
    """
    try:
        return _templates[names]
    except KeyError:
        pass
    if set(names) & set(_HEAD) or len(set(names)) != len(names):
        template = None
    else:
        template = "{" + ",".join(_STRING(n).replace("%", "%%") + ":%s"
                                  for n in _HEAD + names) + "}"
    _templates[names] = template
    return template


def _lines(time: float, router: str, event: str, names: tuple, rows) -> list[str]:
    """
    The records of C{event} at C{time} with fields C{names} and a tuple of
    values per record in C{rows}, each exactly as L{_ENCODE} would write
    the dict C{{time, router, event, **fields}}.
    """
    template = _template(names)
    if template is None:
        head = {"time": time, "router": router, "event": event}
        return [_ENCODE({**head, **dict(zip(names, row))}) for row in rows]
    value = _value
    head = (value(time), value(router), value(event))
    return [template % (head + tuple(map(value, row))) for row in rows]


class EventLog:
    """
    Appends events for one router to one file.

    Records emitted during one turn of the reactor are written together at
    the end of it (a message-heavy router emits tens of thousands a
    second), and handed to the operating system before the next turn, so a
    router killed with SIGKILL loses none that were emitted before its last
    completed turn and leaves at worst a truncated last line, which the
    audit counts as malformed rather than misreading.

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

    def __init__(self, path: str, router: str, clock: IReactorTime) -> None:
        self.path = path
        self._router = router
        self._clock = clock
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")
        self._pending: list[str] = []
        if _ends_inside_a_line(path):
            # A router killed in the middle of a write left a truncated
            # last line: end it, so that our first record stays whole.
            self._file.write("\n")
        self._flush_call = None
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[tuple[str, str]] = Counter()

    def emit(self, event: str, **fields) -> None:
        """
        Append one event.  C{fields} must be JSON-serialisable.
        """
        # One record: the C encoder over a dict is as cheap as the template.
        record = {"time": self._clock.seconds(), "router": self._router, "event": event}
        record.update(fields)
        self._append([_ENCODE(record)])
        self.counts[event] += 1
        if event in COUNTED_BY_REASON:
            self.reasons[event, fields.get("reason")] += 1

    def emit_many(self, event: str, names: tuple, rows) -> None:
        """
        Append one C{event} per tuple in C{rows}, whose values are the
        fields C{names}, in that order (as C{emit(event, **dict(zip(names,
        row)))} would, one after the other): for the message records a
        batch of messages makes at once, at the cost of one template
        filled per record.  The values must be JSON-serialisable.
        """
        lines = _lines(self._clock.seconds(), self._router, event, names, rows)
        self._append(lines)
        self.counts[event] += len(lines)
        if event in COUNTED_BY_REASON:
            at = names.index("reason")
            self.reasons.update((event, row[at]) for row in rows)

    def _append(self, lines: list[str]) -> None:
        """
        Write C{lines} at the end of this reactor turn.
        """
        self._pending.extend(lines)
        if self._flush_call is None:
            self._flush_call = self._clock.callLater(0, self.flush)

    def flush(self) -> None:
        """
        Write every pending record now.
        """
        if self._flush_call is not None:
            if self._flush_call.active():
                self._flush_call.cancel()
            self._flush_call = None
        if self._pending:
            self._file.write("\n".join(self._pending) + "\n")
            self._pending.clear()
            self._file.flush()

    def close(self) -> None:
        """
        Write what is pending and close the file; later emits are errors.
        """
        self.flush()
        self._file.close()


def _ends_inside_a_line(path: str) -> bool:
    """
    Whether the file at C{path} is non-empty and does not end with a newline.
    """
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def read_events(path: str) -> list[dict]:
    """
    Every well-formed record of an event log, in order.  For tests and
    tools; the audit has its own reader with error accounting.
    """
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records
