"""
The explicit schema of one event-log line, as the audit reads it.

Every field of every event in docs/events.md is a column; a line is
parsed against this schema and nothing is inferred, so a log that lacks
an event entirely (a router that never forwarded a message) gives the
same columns as one that has it.  Fields a line does not have are null;
fields the schema does not know (written by a newer router) are ignored.
A line whose field has the wrong JSON type (a string where a number
belongs) is malformed: the audit reports it rather than guess.  The
audit parses only the fields it reads (L{parse_schema}): each field
costs every line its share of the parse, and a field it does not read
cannot mislead it, so, like a field the schema does not know, its type
is not checked.

Identifiers are strings; Spark's JSON reader turns any JSON value into
its text for a string column, so an identifier written as a number never
makes a line malformed.
"""

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

# The event names the audit interprets are the routers' own
# (docs/events.md), imported so that the two cannot drift apart.
from meshroute.events import (
    CONNECTOR_EXHAUSTED,
    HA_EPOCH,
    HA_FAILOVER,
    HA_FENCED,
    HA_FORCE_ACTIVATE,
    HA_REPLICATION,
    HA_STATE,
    LINK_CLOSED,
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
    SECURITY_DENIED,
    SESSION_CLOSED,
    SESSION_DISCONNECTED,
    SESSION_EXPIRED,
    SESSION_OPENED,
    SESSION_REATTACHED,
    SESSION_RECREATED,
    TOPIC_FANNED_OUT,
    TOPIC_SUBSCRIBED,
    TOPIC_UNSUBSCRIBED,
)
from meshroute.link.reasons import CLOSE_REASONS
from meshroute.messages import DEAD_LETTER_QUEUE, EXPIRED_QUEUE

#: The client-session events counted per router.
SESSION_EVENTS = (SESSION_OPENED, SESSION_DISCONNECTED, SESSION_REATTACHED, SESSION_RECREATED,
                  SESSION_EXPIRED, SESSION_CLOSED)


#: An HA instance's own events, counted per instance (C{ha.vote} and
#: C{ha.heartbeat-refused} are a witness's).
HA_INSTANCE_EVENTS = (HA_STATE, HA_EPOCH, HA_FENCED, HA_FAILOVER, HA_REPLICATION,
                      HA_FORCE_ACTIVATE)

#: The column Spark fills with the raw line when it does not fit the schema.
CORRUPT = "_corrupt_record"

#: (name, Spark type, events that write it).  The documentation table in
#: docs/events.md ("Audit") lists the same.
FIELDS = [
    ("time", T.DoubleType(), "every event"),
    ("router", T.StringType(), "every event"),
    ("event", T.StringType(), "every event"),
    ("version", T.StringType(), "router.started"),
    ("pid", T.LongType(), "router.started"),
    ("link", T.StringType(), "link.*"),
    ("peer", T.StringType(),
     "link.*, connector.exhausted, message.forwarded, message.duplicate"),
    ("direction", T.StringType(), "link.*"),
    ("endpoint", T.StringType(), "link.stage (connect, connector links)"),
    ("stage", T.StringType(), "link.stage, link.closed"),
    ("keepalive_interval_ms", T.LongType(), "link.stage (delivery), link.closed"),
    ("code", T.StringType(), "link.rejected"),
    ("detail", T.StringType(), "link.rejected, link.closed"),
    ("by", T.StringType(), "link.rejected"),
    ("reason", T.StringType(),
     "link.closed, message.duplicate, message.dead-lettered, message.dropped, "
     "session.disconnected, session.closed, ha.state, ha.fenced, security.denied, "
     "topic.retained-refused"),
    ("last_heard", T.DoubleType(), "link.closed"),
    ("previous_store_id", T.StringType(), "link.incarnation"),
    ("store_id", T.StringType(), "link.incarnation"),
    ("discarded_last_received", T.LongType(), "link.incarnation"),
    ("attempts", T.LongType(), "connector.exhausted"),
    ("msg_id", T.StringType(), "message.*, topic.fanned-out"),
    ("origin", T.StringType(), "message.*, topic.fanned-out, topic.retained*"),
    ("dest", T.StringType(),
     "message.accepted, message.duplicate, message.dead-lettered, message.expired"),
    ("size", T.LongType(), "message.accepted"),
    ("persistent", T.BooleanType(),
     "message.accepted, message.enqueued, message.consumed, message.expired, topic.fanned-out"),
    ("hops", T.LongType(),
     "message.forwarded, message.enqueued, message.dead-lettered, topic.fanned-out"),
    ("queue", T.StringType(),
     "message.enqueued, message.consumed, message.dropped, topic.subscribed, "
     "topic.unsubscribed"),
    ("accepted_at", T.DoubleType(), "message.enqueued, message.consumed, topic.fanned-out"),
    ("redelivered", T.BooleanType(), "message.consumed"),
    ("duplicate_id", T.StringType(), "message.duplicate"),
    ("where", T.StringType(), "message.expired"),
    ("expires_ms", T.LongType(), "message.expired"),
    ("session_id", T.StringType(), "session.*, message.dropped"),
    ("client_id", T.StringType(),
     "session.*, message.dropped, topic.subscribed, topic.unsubscribed"),
    ("ttl_ms", T.LongType(), "session.opened"),
    ("protocol", T.StringType(), "session.opened"),
    ("requested_session_id", T.StringType(), "session.recreated"),
    ("keep_alive_ms", T.LongType(), "session.disconnected, session.expired"),
    ("last_command_id", T.LongType(), "session.disconnected, session.reattached"),
    ("unacknowledged", T.LongType(), "session.disconnected"),
    ("answers_resent", T.LongType(), "session.reattached"),
    ("deliveries_resent", T.LongType(), "session.reattached"),
    ("requeued", T.LongType(), "session.reattached, session.expired"),
    ("disconnected_for_s", T.DoubleType(), "session.reattached"),
    ("resumable", T.BooleanType(), "session.expired"),
    ("group", T.StringType(), "ha.*"),
    ("role", T.StringType(), "ha.* of an HA instance"),
    ("state", T.StringType(), "ha.state"),
    ("epoch", T.LongType(), "ha.*"),
    ("mode", T.StringType(), "ha.epoch"),
    ("from", T.StringType(), "ha.failover"),
    ("to", T.StringType(), "ha.failover"),
    ("kind", T.StringType(), "ha.failover, topic.subscribed, topic.unsubscribed"),
    ("duration_ms", T.DoubleType(), "ha.failover"),
    ("status", T.StringType(), "ha.replication"),
    ("position", T.LongType(), "ha.replication"),
    ("lag", T.LongType(), "ha.replication"),
    ("step", T.StringType(), "ha.force-activate"),
    ("requested_by", T.StringType(), "ha.force-activate"),
    ("user", T.StringType(), "security.*, topic.subscribed"),
    ("mechanism", T.StringType(), "security.authenticated"),
    ("action", T.StringType(), "security.denied"),
    ("target", T.StringType(), "security.denied"),
    ("publication", T.StringType(), "topic.fanned-out, topic.retained*"),
    ("topic", T.StringType(), "topic.fanned-out, topic.retained*"),
    ("durable", T.ArrayType(T.StringType()), "topic.fanned-out"),
    ("non_durable", T.ArrayType(T.StringType()), "topic.fanned-out"),
    ("sent", T.ArrayType(T.StringType()), "topic.fanned-out"),
    ("targets", T.ArrayType(T.ArrayType(T.StringType())), "topic.fanned-out"),
    ("pattern", T.StringType(), "topic.subscribed"),
    ("name", T.StringType(), "topic.subscribed, topic.unsubscribed"),
    ("shared", T.BooleanType(), "topic.subscribed"),
    ("replaced", T.BooleanType(), "topic.subscribed"),
    ("deleted", T.LongType(), "topic.subscribed, topic.unsubscribed"),
    ("dropped", T.LongType(), "topic.unsubscribed"),
]

#: The fields a message event (C{message.*}) can have: most events are.
MESSAGE_FIELDS = tuple(name for name, _, events in FIELDS
                       if events == "every event" or "message." in events)

#: One event line.
EVENT_SCHEMA = T.StructType([T.StructField(name, kind, True) for name, kind, _ in FIELDS])


def parse_schema(fields=None) -> T.StructType:
    """
    What the reader parses with: the event schema's C{fields} (default:
    all of them) and the corrupt-record column.
    """
    kept = EVENT_SCHEMA.fields if fields is None else [
        field for field in EVENT_SCHEMA.fields if field.name in fields]
    return T.StructType(kept + [T.StructField(CORRUPT, T.StringType(), True)])


#: The fields without which a line is not an event.
REQUIRED = ("time", "router", "event")


def describe_fields() -> str:
    """
    The schema as a Markdown table (docs/events.md embeds it, and a test checks it does).
    """
    rows = ["| field | Spark type | written by |", "|---|---|---|"]
    for name, kind, events in FIELDS:
        rows.append(f"| `{name}` | {kind.simpleString()} | {events} |")
    return "\n".join(rows)


def topic_copy(msg_id: Column) -> Column:
    """
    Whether C{msg_id} is the id of a copy a topic's fan-out made
    (C{PUB/QUEUE@ROUTER}, C{PUB>FROM:DIGEST}; a message's own id, C{ORIGIN:BOOT:N},
    has neither C{/} nor C{>}): not a message of the routes, which the
    topic views follow (L{meshroute.audit.topic_views}).
    """
    return msg_id.contains("/") | msg_id.contains(">")


def about_topics() -> Column:
    """
    Whether an event line is about topics: a C{topic.*} event, or a
    message event of a topic copy (L{topic_copy}).
    """
    event = F.col("event")
    return event.startswith("topic.") | (event.startswith("message.")
                                         & topic_copy(F.col("msg_id")))
