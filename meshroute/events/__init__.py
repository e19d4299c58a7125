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

The package: the event names (L{names}), the writer (L{writer}), how a
record is encoded (L{encoding}), the files' names and order
(L{directory}), closing them and keeping C{retain} (L{closing}), putting
a directory in order after a crash (L{recovery}), reading a log while it
rotates (L{reading}), and the C{[events]} settings (L{settings}).  What
the router and the tools use is imported here.
"""

from meshroute.events.directory import (
    CURRENT_FILE,
    EVENTS_DIR,
    LEGACY_FILE,
    OPEN_SUFFIX,
    event_files,
    events_dir,
    file_name,
)
from meshroute.events.names import (
    CONNECTOR_EXHAUSTED,
    COUNTED_BY_REASON,
    HA_EPOCH,
    HA_FAILOVER,
    HA_FENCED,
    HA_FORCE_ACTIVATE,
    HA_HEARTBEAT_REFUSED,
    HA_REPLICATION,
    HA_STATE,
    HA_VOTE,
    LINK_CLOSED,
    LINK_INCARNATION,
    LINK_REJECTED,
    LINK_STAGE,
    MESSAGE_ACCEPTED,
    MESSAGE_CONSUMED,
    MESSAGE_DEAD_LETTERED,
    MESSAGE_DROPPED,
    MESSAGE_DUPLICATE,
    MESSAGE_ENQUEUED,
    MESSAGE_EXPIRED,
    MESSAGE_FORWARDED,
    ROUTER_STARTED,
    ROUTER_STOPPED,
    SECURITY_AUTHENTICATED,
    SECURITY_DENIED,
    SESSION_CLOSED,
    SESSION_DISCONNECTED,
    SESSION_EXPIRED,
    SESSION_OPENED,
    SESSION_REATTACHED,
    SESSION_RECREATED,
    TOPIC_FANNED_OUT,
    TOPIC_RETAINED,
    TOPIC_RETAINED_CLEARED,
    TOPIC_RETAINED_REFUSED,
    TOPIC_SUBSCRIBED,
    TOPIC_UNSUBSCRIBED,
    TRANSACTION_COMMITTED,
    TRANSACTION_HEURISTIC,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLED_BACK,
)
from meshroute.events.reading import EventFollower, read_events
from meshroute.events.settings import RetainBytes, RotationSettings
from meshroute.events.writer import EventLog

__all__ = [
    "CONNECTOR_EXHAUSTED", "COUNTED_BY_REASON", "CURRENT_FILE", "EVENTS_DIR", "HA_EPOCH",
    "HA_FAILOVER", "HA_FENCED", "HA_FORCE_ACTIVATE", "HA_HEARTBEAT_REFUSED", "HA_REPLICATION",
    "HA_STATE", "HA_VOTE", "LEGACY_FILE", "LINK_CLOSED", "LINK_INCARNATION", "LINK_REJECTED",
    "LINK_STAGE", "MESSAGE_ACCEPTED", "MESSAGE_CONSUMED", "MESSAGE_DEAD_LETTERED",
    "MESSAGE_DROPPED", "MESSAGE_DUPLICATE", "MESSAGE_ENQUEUED", "MESSAGE_EXPIRED",
    "MESSAGE_FORWARDED", "OPEN_SUFFIX", "ROUTER_STARTED", "ROUTER_STOPPED",
    "SECURITY_AUTHENTICATED", "SECURITY_DENIED", "SESSION_CLOSED", "SESSION_DISCONNECTED",
    "SESSION_EXPIRED", "SESSION_OPENED", "SESSION_REATTACHED", "SESSION_RECREATED",
    "TOPIC_FANNED_OUT", "TOPIC_RETAINED", "TOPIC_RETAINED_CLEARED",
    "TOPIC_RETAINED_REFUSED", "TOPIC_SUBSCRIBED", "TOPIC_UNSUBSCRIBED",
    "TRANSACTION_COMMITTED", "TRANSACTION_HEURISTIC", "TRANSACTION_PREPARED",
    "TRANSACTION_ROLLED_BACK", "EventFollower", "EventLog", "RetainBytes", "RotationSettings", "event_files",
    "events_dir", "file_name", "read_events",
]
