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

from twisted.internet.interfaces import IReactorTime

LINK_STAGE = "link.stage"
LINK_REJECTED = "link.rejected"
LINK_CLOSED = "link.closed"
ROUTER_STARTED = "router.started"
ROUTER_STOPPED = "router.stopped"


class EventLog:
    """
    Appends events for one router to one file.

    Each record is written and flushed as one line, so a router killed with
    SIGKILL leaves at worst a truncated last line, which the audit counts
    as malformed rather than misreading.
    """

    def __init__(self, path: str, router: str, clock: IReactorTime) -> None:
        self.path = path
        self._router = router
        self._clock = clock
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")

    def emit(self, event: str, **fields) -> None:
        """
        Append one event.  C{fields} must be JSON-serialisable.
        """
        record = {"time": self._clock.seconds(), "router": self._router, "event": event}
        record.update(fields)
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        """
        Close the file; later emits are errors.
        """
        self._file.close()


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
