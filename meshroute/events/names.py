"""
The names of the events: the C{event} field of every record, a stable
contract with the audit and every other reader of the log (docs/events.md
lists each event's fields).
"""

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
# A client's two-phase transaction (docs/events.md, "Transaction events").
TRANSACTION_PREPARED = "transaction.prepared"
TRANSACTION_COMMITTED = "transaction.committed"
TRANSACTION_ROLLED_BACK = "transaction.rolled-back"
TRANSACTION_HEURISTIC = "transaction.heuristic"
# Topics (docs/events.md, "Topic events").
TOPIC_FANNED_OUT = "topic.fanned-out"
TOPIC_SUBSCRIBED = "topic.subscribed"
TOPIC_UNSUBSCRIBED = "topic.unsubscribed"
TOPIC_RETAINED = "topic.retained"
TOPIC_RETAINED_CLEARED = "topic.retained-cleared"
TOPIC_RETAINED_REFUSED = "topic.retained-refused"
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

#: The events counted by reason too
#: (L{meshroute.events.writer.EventLog.reasons}): their reasons are codes
#: from a fixed set, so the counts stay few.
COUNTED_BY_REASON = frozenset({LINK_CLOSED, MESSAGE_DEAD_LETTERED, MESSAGE_DROPPED})
